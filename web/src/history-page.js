// The History view of an instance (`/instances/{iid}?view=history`): its closed sessions, newest
// first, each with its recording played in the asciinema player (seekable, at any speed). The
// recording is fetched with the page's credential and handed to the player as data, so the
// player never needs a URL that carries a secret.

// The player's styles are small and always in app.css; its code (a terminal emulator of its
// own) is loaded the first time a recording plays, so the terminal pages do not carry it.
import 'asciinema-player/dist/bundle/asciinema-player.css';
import { api, ApiError } from './api.js';
import { el, loadingView } from './dom.js';

/** The speeds offered; the player's own keys (`<`, `>`) change it too. */
const SPEEDS = [0.5, 1, 2, 4, 8];

/**
 * @param {HTMLElement} app
 * @param {string} instanceId
 * @param {{ onUnauthorized: () => void, onRefused: (error: unknown) => void }} handlers
 */
export async function showHistoryPage(app, instanceId, { onUnauthorized, onRefused }) {
  app.replaceChildren(loadingView('Loading the history…'));
  document.title = 'History · ptyhub';
  let instance;
  let sessions;
  try {
    [instance, sessions] = await Promise.all([api.getInstance(instanceId), api.listSessions(instanceId, { includeClosed: true })]);
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) return onUnauthorized();
    return onRefused(error);
  }
  const closed = sessions.filter((session) => session.status === 'closed').reverse();
  const status = el('p', { class: 'history-status', role: 'status', 'aria-live': 'polite' });
  const stage = el('section', { class: 'history-player', 'aria-label': 'Player' });
  const speed = el('select', { 'aria-label': 'Speed', class: 'history-speed' },
    ...SPEEDS.map((value) => el('option', { value: String(value), selected: value === 1 }, `${value}×`)));
  /** @type {import('asciinema-player').Player | null} */
  let player = null;
  /** @type {{ session: any, cast: string } | null} */
  let current = null;

  const start = async (/** @type {number} */ at) => {
    if (!current) return;
    const AsciinemaPlayer = await import('asciinema-player');
    player?.dispose();
    stage.replaceChildren();
    const { session, cast } = current;
    player = AsciinemaPlayer.create({ data: cast }, stage, {
      autoPlay: true,
      speed: Number(speed.value),
      startAt: at,
      fit: 'width',
      terminalFontFamily: 'ui-monospace, SFMono-Regular, Menlo, Consolas, monospace',
    });
    const created = player;
    // The player's events say where playback is, in words a screen reader and the tests read.
    created.addEventListener('playing', () => { status.textContent = `Playing ${session.name}`; stage.dataset.state = 'playing'; });
    created.addEventListener('pause', () => { status.textContent = `Paused ${session.name}`; stage.dataset.state = 'paused'; });
    created.addEventListener('ended', () => { status.textContent = `Ended ${session.name}`; stage.dataset.state = 'ended'; });
  };

  // A new speed starts the player again where it was: the player takes its speed at creation.
  speed.addEventListener('change', async () => {
    if (!current) return;
    // Said before the first await: until the new player reports, the old one's "Ended ..." is
    // no longer true.
    status.textContent = `Restarting ${current.session.name} at ${speed.value}x…`;
    stage.dataset.state = 'loading';
    const at = player ? await player.getCurrentTime() : 0;
    await start(at);
  });

  const play = async (/** @type {any} */ session, /** @type {HTMLElement} */ button) => {
    status.textContent = `Loading the recording of ${session.name}…`;
    stage.dataset.state = 'loading';
    for (const other of list.querySelectorAll('[aria-pressed]')) other.setAttribute('aria-pressed', 'false');
    button.setAttribute('aria-pressed', 'true');
    let cast;
    try {
      cast = await api.getRecording(instanceId, session.id);
    } catch (error) {
      if (error instanceof ApiError && error.status === 401) return onUnauthorized();
      player?.dispose();
      player = null;
      stage.replaceChildren();
      stage.dataset.state = 'missing';
      status.textContent = error instanceof ApiError && error.status === 404
        ? `${session.name} has no recording (the instance did not record it, or it was deleted).`
        : `The recording of ${session.name} cannot be loaded: ${error instanceof ApiError ? error.detail : error}`;
      return;
    }
    current = { session, cast };
    await start(0);
  };

  const list = el('ul', { class: 'history-list', 'aria-label': 'Closed sessions' });
  for (const session of closed) {
    const button = el('button', { type: 'button', class: 'text-button', 'aria-pressed': 'false' }, 'Play');
    button.addEventListener('click', () => play(session, button));
    list.append(el('li', { class: 'history-item', 'data-session-id': session.id },
      el('span', { class: 'history-name' }, session.name),
      el('span', { class: 'history-meta' }, describe(session)),
      button));
  }
  if (closed.length === 0) list.append(el('li', { class: 'empty' }, 'No closed sessions yet.'));

  app.replaceChildren(el('div', { class: 'history-page' },
    el('header', { class: 'topbar' },
      el('a', { class: 'back', href: `/instances/${encodeURIComponent(instanceId)}`, 'aria-label': 'Back to the terminals', title: 'Back to the terminals' }, '‹'),
      el('span', { class: 'instance-name' }, instance.name),
      el('span', { class: 'spacer' }),
      el('label', { class: 'history-speed-label' }, 'Speed ', speed)),
    el('main', { class: 'history-main' },
      el('h1', {}, 'History'),
      list,
      status,
      stage)));
  document.title = `History of ${instance.name} · ptyhub`;
}

/** When the session ran and how it ended. */
function describe(/** @type {any} */ session) {
  const when = (/** @type {string | null | undefined} */ at) => (at ? new Date(at).toLocaleString() : '?');
  const reason = session.close_reason ? `, ${String(session.close_reason).replaceAll('_', ' ')}` : '';
  return `${when(session.created_at)} – ${when(session.closed_at)}${reason}`;
}
