// The terminal page of one instance (`/instances/{iid}`): the tab strip (with each session's
// window title, what its terminal is doing, and a mark on a background tab that rang the bell,
// waits for input or exited, counted in the page's title), one SessionTab per live session kept
// in step with the instance's session-change events (renames, creates, closes, status, terminal
// state and commands, made anywhere), the header (theme, typing prediction, notifications,
// sharing, the read-only view), and the composition of the page's parts: its keyboard
// (keyboard.js) and key bar (key-bar.js), the find bar (search.js), the copy view (copy.js),
// programs' requests to copy (clipboard.js), the commands' marks and menu (commands.js, with the
// page's side of the menu's actions here), fullscreen (fullscreen.js) and the touch screen's
// chrome (touch.js).

import { api, ApiError } from './api.js';
import { attentionCame, attentionSeen, waitEnded } from './attention.js';
import { tabClientId } from './client-id.js';
import { ProgramClipboard, writeToClipboard } from './clipboard.js';
import { CommandMenu } from './commands.js';
import { CopyView } from './copy.js';
import { el, icon, iconButton, loadingView } from './dom.js';
import { Fullscreen } from './fullscreen.js';
import { KeyBar } from './key-bar.js';
import { listenForShortcuts, terminalMayHave } from './keyboard.js';
import { PresenceBar } from './presence.js';
import { SearchBar } from './search.js';
import { SessionTab, Status } from './session-tab.js';
import {
  localEchoSettings, onSettingsChange, setLocalEchoMode, setLocalEchoThreshold, setThemeChoice, setWaitingNotifications,
  themeChoice, waitingNotifications,
} from './settings.js';
import { isTouchLayout, TouchChrome } from './touch.js';

const ACTIVE_KEY_PREFIX = 'ptyhub.active.';
/** The last `last_bell_at` of a session that the user saw (its tab shown), per session id. */
const SEEN_BELL_KEY_PREFIX = 'ptyhub.seenBell.';
const EVENTS_BACKOFF_FIRST_MS = 500;
const EVENTS_BACKOFF_MAX_MS = 10_000;
const THEME_WORDS = Object.freeze({ system: 'Theme: follows the system', light: 'Theme: light', dark: 'Theme: dark' });
/** @type {Record<string, 'system' | 'light' | 'dark'>} */
const NEXT_THEME = { system: 'light', light: 'dark', dark: 'system' };
/** What a tab's attention mark says in the tab's accessible name (its look is in style.css). */
const ATTENTION_WORDS = Object.freeze({ bell: 'bell rang', input: 'waiting for input', exited: 'process exited' });
const TOAST_MS = 10_000;

/** Loads the instance and its sessions and shows the page; `onRefused(kind)` handles 401/403/404. */
export async function showTerminalPage(app, instanceId, { viewer, viewerOnly = false, onUnauthorized, onRefused }) {
  app.replaceChildren(loadingView('Loading the instance and its sessions…'));
  document.title = 'Loading · ptyhub';
  let instance;
  let sessions;
  try {
    [instance, sessions] = await Promise.all([api.getInstance(instanceId), api.listSessions(instanceId)]);
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) return onUnauthorized();
    return onRefused(error);
  }
  const page = new TerminalPage(app, instance, sessions, { viewer: viewer || viewerOnly, viewerOnly, onUnauthorized });
  return page;
}

class TerminalPage {
  constructor(app, instance, sessions, { viewer, viewerOnly, onUnauthorized }) {
    this.instance = instance;
    this.instanceId = instance.id;
    this.maxSessions = Number(instance.max_sessions) || 5;
    this.viewer = viewer;
    // Signed in with a share link: a viewer that cannot switch to control.
    this.viewerOnly = viewerOnly;
    this.onUnauthorized = onUnauthorized;
    this.tabs = [];
    this.active = null;
    this.size = null;
    this.toastTimer = null;
    this.creating = false;
    this.clientId = tabClientId();
    this.watchAbort = new AbortController();

    this.build(app);
    this.installListeners();
    document.title = `${instance.name} · ptyhub`;

    for (const session of sessions) {
      const tab = this.makeTab({ session });
      this.addTab(tab);
      // A bell that rang while this tab was not shown, even while the page was closed, marks it.
      if (session.last_bell_at && session.last_bell_at !== sessionStorage.getItem(SEEN_BELL_KEY_PREFIX + session.id)) {
        tab.pendingBell = true;
      }
    }
    if (this.tabs.length === 0 && !viewer) this.addTab(this.makeTab({ session: null }));
    const remembered = sessionStorage.getItem(this.activeKey);
    const first = this.tabs.find((tab) => tab.sessionId === remembered) ?? this.tabs[0];
    if (first) this.activate(first);
    else this.showEmptyViewer();
    for (const tab of this.tabs) {
      if (tab.pendingBell) this.markAttention(tab, 'bell');
      // Only the shown tab attaches now; the others when first shown. Attaching every tab would
      // take control of every session from wherever it is used (a laptop, a script) at once.
      // A viewer takes nothing from anyone, and watches every tab live.
      if (tab === this.active || this.viewer) tab.connect();
      else this.attachWhenShown(tab);
    }
    this.updateControls();
    this.unwatchSettings = onSettingsChange(() => this.applySettings());
    this.watchSessions();
  }

  // ---- the instance's session changes, live --------------------------------------------------

  /** Follows the session-change events until the page goes, reconnecting with backoff. */
  async watchSessions() {
    const signal = this.watchAbort.signal;
    let attempt = 0;
    while (!signal.aborted) {
      try {
        await api.watchSessions(this.instanceId, (name, data) => {
          attempt = 0;
          this.sessionEvent(name, data);
        }, signal);
      } catch (error) {
        if (error instanceof ApiError && error.status === 401) {
          this.onUnauthorized();
          return;
        }
        // 403/404: the instance is gone or no longer ours; the tabs say so on their own.
        if (error instanceof ApiError && (error.status === 403 || error.status === 404)) return;
      }
      if (signal.aborted) return;
      const ceiling = Math.min(EVENTS_BACKOFF_MAX_MS, EVENTS_BACKOFF_FIRST_MS * 2 ** attempt);
      attempt += 1;
      await new Promise((resolve) => setTimeout(resolve, ceiling / 2 + Math.random() * (ceiling / 2)));
    }
  }

  /**
   * One session-change event: the opening list adds the tabs this page lacks, `created` adds a
   * tab, `closed` removes one (a tab waiting to reconnect to it says it expired instead), and
   * every other change updates the tab's name and title.
   * @param {string} name
   * @param {any} data
   */
  sessionEvent(name, data) {
    if (name === 'sessions') {
      for (const session of data.sessions ?? []) this.followSession(session);
      return;
    }
    if (name === 'command_started' || name === 'command_finished') {
      this.tabs.find((tab) => tab.sessionId === data?.session_id)?.commandMarks.command(data.command);
      return;
    }
    const session = data;
    if (!session?.id) return;
    if (name === 'closed' || session.status === 'closed') {
      const tab = this.tabs.find((candidate) => candidate.sessionId === session.id);
      // A tab waiting to reconnect says its session expired instead of vanishing.
      if (tab && !tab.closing && !tab.closedWhileAway()) this.removeTab(tab, { byOthers: true });
      return;
    }
    this.followSession(session);
  }

  /** A tab that attaches when it is first shown, and says so until then. */
  attachWhenShown(/** @type {SessionTab} */ tab) {
    tab.connectWhenShown = true;
    tab.setStatus(Status.idle);
  }

  /** Adds a tab for a live session the page does not show yet, or updates the one it has. */
  followSession(/** @type {import('./api.js').SessionRecord} */ session) {
    if (session.status === 'closed') return;
    const known = this.tabs.find((tab) => tab.sessionId === session.id);
    if (known) {
      known.applyRecord(session);
      return;
    }
    // This page's own fresh tab, which learns its id from its socket's `connected`.
    if ((session.aliases ?? []).includes(`client:${this.clientId}`) && this.tabs.some((tab) => tab.sessionId === null)) return;
    // Attached only once shown: every open page attaching at once would take the controller
    // from each other, and a session made by a script is this page's to watch until selected.
    const tab = this.makeTab({ session });
    this.attachWhenShown(tab);
    this.addTab(tab);
    tab.applyRecord(session);
    this.emptyNote?.remove();
    this.emptyNote = null;
    if (!this.active) this.activate(tab);
  }

  applySettings() {
    let resized = false;
    for (const tab of this.tabs) resized = tab.applySettings() || resized;
    this.themeButton.setAttribute('aria-label', THEME_WORDS[themeChoice()]);
    this.themeButton.title = THEME_WORDS[themeChoice()];
    this.themeButton.dataset.theme = themeChoice();
    this.showEchoSettings();
    this.notifyButton?.setAttribute('aria-pressed', String(waitingNotifications()));
    if (resized) this.scheduleFit();
  }

  // ---- typing prediction (local-echo.js) ---------------------------------------------------

  /** The panel of the local echo setting: off or auto, the threshold, the measured round trip. */
  buildEchoSettings() {
    this.echoMode = el('select', { 'aria-label': 'Prediction', onchange: () => setLocalEchoMode(this.echoMode.value === 'off' ? 'off' : 'auto') },
      el('option', { value: 'auto' }, 'Auto: over a slow link'),
      el('option', { value: 'off' }, 'Off'));
    this.echoThreshold = el('input', {
      type: 'number', min: '0', max: '10000', step: '1', class: 'echo-threshold', 'aria-label': 'Threshold in milliseconds',
      onchange: () => setLocalEchoThreshold(this.echoThreshold.value === '' ? null : Number(this.echoThreshold.value)),
    });
    this.echoMeasured = el('span', { class: 'echo-measured', 'aria-live': 'polite' });
    this.echoPanel = el('div', { class: 'echo-settings', role: 'dialog', 'aria-label': 'Typing prediction', hidden: true },
      el('p', {}, 'Draws typed characters at once, dimmed, when the round trip to the server is slower than the threshold; the server\'s output confirms or replaces them.'),
      el('label', {}, 'Prediction ', this.echoMode),
      el('label', {}, 'Threshold (ms) ', this.echoThreshold),
      this.echoMeasured,
      el('button', { type: 'button', onclick: () => this.toggleEchoSettings(false) }, 'Done'));
    this.echoPanel.addEventListener('keydown', (event) => {
      event.stopPropagation();
      if (event.key === 'Escape') this.toggleEchoSettings(false);
    });
    this.showEchoSettings();
  }

  showEchoSettings() {
    if (!this.echoPanel) return;
    const { mode, thresholdMs } = localEchoSettings();
    this.echoMode.value = mode;
    if (document.activeElement !== this.echoThreshold) this.echoThreshold.value = String(thresholdMs);
    const rtt = this.active?.localEcho?.rtt ?? null;
    this.echoMeasured.textContent = rtt === null ? 'Round trip: not measured yet (type at a prompt)' : `Round trip: ${Math.round(rtt)} ms`;
  }

  toggleEchoSettings(open = this.echoPanel.hidden) {
    this.echoPanel.hidden = !open;
    this.echoButton.setAttribute('aria-expanded', String(open));
    if (open) {
      this.showEchoSettings();
      this.echoMode.focus();
    } else {
      this.active?.terminal.focus();
    }
  }

  get activeKey() {
    return `${ACTIVE_KEY_PREFIX}${this.instanceId}`;
  }

  // ---- layout ------------------------------------------------------------------------------

  build(app) {
    this.root = el('div', { class: `terminal-page${this.viewer ? ' viewer' : ''}` });
    this.panes = el('main', { class: 'panes' });
    this.chrome = new TouchChrome({
      root: this.root, panes: this.panes, isFullscreen: () => this.fullscreen.on, scheduleFit: () => this.scheduleFit(),
    });
    this.fullscreen = new Fullscreen({
      root: this.root, chrome: this.chrome, scheduleFit: () => this.scheduleFit(), activeTab: () => this.active,
    });
    this.search = new SearchBar({ activeTab: () => this.active, tabs: () => this.tabs });
    this.copy = new CopyView({ activeTab: () => this.active, showToast: (text, kind) => this.showToast(text, kind) });
    this.keys = new KeyBar({
      activeTab: () => this.active, openCopyView: () => this.copy.open(), showToast: (text) => this.showToast(text),
    });
    this.commandMenu = new CommandMenu({
      copyCommand: (command) => this.copyText(command.command, 'the command'),
      copyOutput: (command) => this.copyCommandOutput(command),
      runAgain: (command) => this.runAgain(command),
    });
    // What programs may copy: only where the page controls sessions (a viewer loads no handler).
    this.programClipboard = this.viewer ? null : new ProgramClipboard({ focusTerminal: () => this.active?.terminal.focus() });

    this.mobileTitle = el('span', { class: 'mobile-title', 'data-testid': 'active-session-name' });
    this.presenceBar = new PresenceBar();
    this.viewerSwitch = this.viewerOnly
      ? null
      : this.viewer
        ? el('a', { class: 'text-button', href: `/instances/${encodeURIComponent(this.instanceId)}` }, 'Take control')
        : iconButton('Open read-only view', icon('eye'), () => this.openViewer());
    this.shareButton = this.viewer ? null : iconButton('Share read-only', icon('link'), () => this.shareReadOnly());
    this.echoButton = this.viewer ? null : iconButton('Typing prediction', icon('keyboard'), () => this.toggleEchoSettings(), { 'aria-expanded': 'false' });
    this.notifyButton = 'Notification' in window
      ? iconButton('Notify when a session waits for input', icon('bell'), () => this.toggleWaitingNotifications(), { 'aria-pressed': String(waitingNotifications()) })
      : null;
    this.header = el('header', { class: 'topbar' },
      el('a', { class: 'back', href: '/', 'aria-label': 'All instances', title: 'All instances' }, '‹'),
      el('span', { class: 'instance-name' }, this.instance.name),
      this.mobileTitle,
      this.viewer ? el('span', { class: 'viewer-badge' }, 'Read-only') : null,
      this.presenceBar.element,
      el('span', { class: 'spacer' }),
      // A share link's viewer cannot download recordings, so it has no history to play.
      this.viewerOnly ? null : el('a', { class: 'text-button', href: `/instances/${encodeURIComponent(this.instanceId)}?view=history` }, 'History'),
      this.themeButton = iconButton(THEME_WORDS[themeChoice()], icon('theme'), () => setThemeChoice(NEXT_THEME[themeChoice()]), { 'data-theme': themeChoice() }),
      this.echoButton,
      this.notifyButton,
      this.programClipboard?.button,
      this.shareButton,
      this.viewerSwitch,
    );
    if (!this.viewer) this.buildEchoSettings();

    this.tablist = el('div', { class: 'tabs', role: 'tablist', 'aria-label': 'Sessions', onkeydown: (event) => this.tablistKey(event) });
    this.tabsWrap = el('div', { class: 'tabs-wrap' }, this.tablist);
    this.tablist.addEventListener('scroll', () => this.updateFades(), { passive: true });
    this.newButton = el('button', { type: 'button', class: 'new-tab', 'aria-label': 'New session', onclick: () => this.createSession() }, '+');
    this.newWrap = el('span', { class: 'new-wrap' }, this.newButton);
    this.previousButton = iconButton('Previous session', '‹', () => this.step(-1));
    this.nextButton = iconButton('Next session', '›', () => this.step(1));
    this.restartButton = iconButton('Restart session', '⟳', () => this.active && this.restart(this.active));
    // On a phone the tab's actions are a menu at the strip's start, so that + is its last item,
    // where the thumb looks for it; on a wider screen they follow the tabs.
    this.tabActions = el('div', { class: 'tab-actions', id: 'tab-actions' },
      this.previousButton, this.nextButton, this.restartButton, this.search.button, this.fullscreen.button);
    this.tabActions.addEventListener('click', (event) => {
      if (event.target instanceof Element && event.target.closest('button')) this.toggleTabActions(false);
    });
    this.tabActionsButton = iconButton('Session actions', '⋯', () => this.toggleTabActions(), {
      class: 'icon-button tab-actions-toggle', 'aria-expanded': 'false', 'aria-controls': 'tab-actions',
    });
    this.tabbar = el('nav', { class: 'tabbar', 'aria-label': 'Session tabs' },
      this.tabActionsButton, this.tabsWrap, this.newWrap, this.tabActions);

    this.viewerBanner = this.viewer
      ? el('div', { class: 'viewer-banner', role: 'note' }, 'Read-only view: you are watching these sessions; typing is disabled.')
      : null;
    this.toast = el('div', { class: 'toast', role: 'alert', hidden: true });

    const parts = [this.header, this.tabbar, this.viewerBanner, this.search.element, this.echoPanel,
      this.programClipboard?.panel, this.panes, this.keys.element, this.chrome.handle, this.copy.element,
      this.programClipboard?.notice, this.commandMenu.element, this.toast];
    // Only a viewer has the banner, only a controller the prediction panel; `append` would write
    // the missing one out as text.
    this.root.append(...parts.filter((part) => part));
    app.replaceChildren(this.root);
    this.followTouchLayout();
  }

  /** The touch layout (key bar, chrome hidden by a tap) on any touch screen or narrow window. */
  followTouchLayout() {
    this.root.classList.toggle('touch', isTouchLayout());
  }

  /** Opens or closes the phone's menu of the tab's actions. */
  toggleTabActions(open = this.tabActionsButton.getAttribute('aria-expanded') !== 'true') {
    this.tabActionsButton.setAttribute('aria-expanded', String(open));
    this.tabbar.classList.toggle('actions-open', open);
  }

  installListeners() {
    listenForShortcuts({
      openSearch: () => this.search.open(),
      toggleFullscreen: () => this.fullscreen.toggle(),
      createSession: () => this.createSession(),
      closeActive: () => this.active && this.requestClose(this.active),
      previous: () => this.step(-1),
      next: () => this.step(1),
      restartActive: () => this.active && this.restart(this.active),
      previousCommand: () => this.active?.commandMarks.jump(-1),
      nextCommand: () => this.active?.commandMarks.jump(1),
    });
    window.addEventListener('resize', () => {
      this.followTouchLayout();
      this.scheduleFit();
    });
    // A pane's terminal area changes size with the window and when a banner or notice appears.
    this.resizeObserver = new ResizeObserver(() => this.scheduleFit());
    this.resizeObserver.observe(this.panes);
    window.addEventListener('online', () => this.tabs.forEach((tab) => tab.reconnectNow()));
    window.visualViewport?.addEventListener('resize', () => this.followVisualViewport());
  }

  // ---- tabs --------------------------------------------------------------------------------

  makeTab({ session }) {
    const tab = new SessionTab({
      instanceId: this.instanceId,
      session,
      clientId: this.clientId,
      viewer: this.viewer,
      viewerOnly: this.viewerOnly,
      size: this.size,
      callbacks: {
        onChange: (changed) => this.renderTab(changed),
        onKeyboardInput: (from, data) => this.keyboardInput(from, data),
        // Esc goes to the program, in fullscreen too: fullscreen is left with its shortcut or button.
        terminalKeyAllowed: (event) => terminalMayHave(event),
        onTerminalState: (from, previous) => this.terminalStateChanged(from, previous),
        onConnected: (from) => this.loadCommands(from),
        onCommandMark: (from, prompt, element) => { if (prompt.command) this.commandMenu.open(prompt.command, element); },
        onSearchResults: (from, results) => { if (from === this.active) this.search.showResults(results); },
        onRestart: (from) => this.restart(from),
        onAttention: (from, kind) => this.markAttention(from, kind),
        onReplace: (from) => this.replace(from),
        onClipboardWrite: (from, text) => this.programClipboard?.request(from, text),
        onUnauthorized: () => this.onUnauthorized(),
      },
    });
    const name = el('span', { class: 'tab-name' }, tab.name);
    // The mark of a background tab that wants a look: a glyph to see, words for the tab's name.
    const attentionMark = el('span', { class: 'attention-mark', 'aria-hidden': 'true', hidden: true });
    const attentionWords = el('span', { class: 'visually-hidden' });
    // What the session's terminal is doing: a small badge to see, and words the tab is described
    // by (hidden: a description may be). Both beside the tab, not in it: its text is its name.
    const stateBadge = el('span', { class: 'tab-state', 'aria-hidden': 'true', hidden: true });
    const stateWords = el('span', { hidden: true });
    const element = el('div', {
      class: 'tab', role: 'tab', tabindex: '-1', 'aria-selected': 'false',
      onclick: () => this.activate(tab),
      ondblclick: () => this.startRename(tab),
    }, el('span', { class: 'dot', 'aria-hidden': 'true' }), name, attentionMark, attentionWords);
    const exitBadge = el('span', { class: 'tab-exit', hidden: true });
    const closeButton = el('button', {
      type: 'button', class: 'tab-close', title: 'Close session (Alt+Shift+W)',
      onclick: (event) => { event.stopPropagation(); this.requestClose(tab); },
    }, '×');
    const confirm = el('span', { class: 'close-confirm', hidden: true });
    const item = el('div', { class: 'tab-item', role: 'presentation' }, element, stateBadge, exitBadge, closeButton, confirm, stateWords);
    tab.ui = { item, element, name, stateBadge, stateWords, attentionMark, attentionWords, exitBadge, closeButton, confirm };
    return tab;
  }

  /** @param {SessionTab} tab @param {{ after?: SessionTab }} [options] */
  addTab(tab, { after } = {}) {
    const index = after ? this.tabs.indexOf(after) + 1 : this.tabs.length;
    this.tabs.splice(index, 0, tab);
    const next = this.tabs[index + 1];
    if (next) this.tablist.insertBefore(tab.ui.item, next.ui.item);
    else this.tablist.append(tab.ui.item);
    this.panes.append(tab.pane);
    this.resizeObserver.observe(tab.host);
    this.renderTab(tab);
    this.updateControls();
  }

  /** Removes a tab; `byOthers`: its session was closed elsewhere, and the page may be left empty. */
  removeTab(tab, { byOthers = false } = {}) {
    const index = this.tabs.indexOf(tab);
    if (index < 0) return;
    this.tabs.splice(index, 1);
    tab.ui.item.remove();
    this.resizeObserver.unobserve(tab.host);
    tab.dispose();
    if (this.active === tab) {
      this.active = null;
      const neighbour = this.tabs[Math.min(index, this.tabs.length - 1)];
      if (neighbour) this.activate(neighbour);
    }
    if (byOthers && this.tabs.length === 0) this.showEmpty();
    this.updateControls();
  }

  /** No session left after others closed them all: say so, and offer a new one. */
  showEmpty() {
    if (this.viewer) {
      this.showEmptyViewer();
      return;
    }
    this.mobileTitle.textContent = '';
    this.emptyNote = el('div', { class: 'empty' },
      el('p', {}, 'Every session of this instance was closed.'),
      el('button', { type: 'button', onclick: () => { this.emptyNote?.remove(); this.emptyNote = null; this.openFreshTab(); } }, 'Start a new session'));
    this.panes.append(this.emptyNote);
  }

  renderTab(tab) {
    if (tab === this.active) this.presenceBar?.show(tab);
    if (!tab.ui) return;
    const { item, element, name, stateBadge, stateWords, attentionMark, attentionWords, exitBadge, closeButton } = tab.ui;
    const paneId = `pane-${tab.sessionId ?? `new-${this.tabs.indexOf(tab)}`}`;
    tab.pane.id = paneId;
    element.id = `tab-${paneId}`;
    element.setAttribute('aria-controls', paneId);
    tab.pane.setAttribute('aria-labelledby', element.id);
    tab.stateRegion.id = `${paneId}-state`;
    stateWords.id = `${paneId}-terminal-state`;
    element.setAttribute('aria-describedby', `${tab.stateRegion.id} ${stateWords.id}`);
    if (!name.querySelector('input') && name.textContent !== tab.name) name.textContent = tab.name;
    const status = tab.ended === 'taken_over' ? 'error' : tab.status;
    element.dataset.status = status;
    if (tab.sessionId) element.dataset.sessionId = tab.sessionId;
    item.dataset.status = status;
    const doing = terminalStateWords(tab);
    stateWords.textContent = doing;
    const badge = terminalStateBadge(tab);
    stateBadge.hidden = badge === '';
    stateBadge.dataset.state = tab.terminalState.state ?? '';
    stateBadge.dataset.progress = tab.terminalState.progress?.kind ?? '';
    stateBadge.textContent = badge;
    const described = doing ? `${tab.stateText}; ${doing}` : tab.stateText;
    const tooltip = tab.windowTitle ? `${tab.windowTitle}\n${tab.name}: ${described}` : `${tab.name}: ${described}`;
    item.title = tooltip;
    element.title = tooltip;
    if (tab.attention) element.dataset.attention = tab.attention;
    else delete element.dataset.attention;
    attentionMark.hidden = !tab.attention;
    attentionWords.textContent = tab.attention ? ` (${ATTENTION_WORDS[tab.attention]})` : '';
    const showExit = tab.exited && tab.exitCode !== null && tab.exitCode !== undefined;
    exitBadge.hidden = !showExit;
    exitBadge.textContent = showExit ? `exit ${tab.exitCode}` : '';
    closeButton.setAttribute('aria-label', `Close ${tab.name}`);
    closeButton.hidden = this.viewer;
    if (tab === this.active) this.mobileTitle.textContent = tab.name;
    // The handle that brings hidden tabs back carries the mark of any tab that wants a look.
    const wanting = this.tabs.find((other) => other.attention)?.attention;
    this.chrome.markHandle(wanting, ATTENTION_WORDS[wanting]);
    this.updateTitle();
    this.updateControls();
  }

  /** The page's title counts the sessions that wait for input in tabs not shown: `(2) web-1 · ptyhub`. */
  updateTitle() {
    const waiting = this.tabs.filter((tab) => tab.attention === 'input').length;
    const title = `${this.instance.name} · ptyhub`;
    document.title = waiting > 0 ? `(${waiting}) ${title}` : title;
  }

  activate(tab) {
    if (!this.tabs.includes(tab)) return;
    const previous = this.active;
    this.active = tab;
    this.presenceBar.show(tab);
    if (tab.connectWhenShown) {
      tab.connectWhenShown = false;
      tab.connect();
    }
    // Looking at the tab is what its mark asked for.
    if (attentionSeen(tab)) this.renderTab(tab);
    for (const other of this.tabs) {
      const selected = other === tab;
      other.ui.element.setAttribute('aria-selected', String(selected));
      other.ui.element.tabIndex = selected ? 0 : -1;
      other.ui.item.classList.toggle('active', selected);
      other.pane.hidden = !selected;
    }
    if (tab.sessionId) sessionStorage.setItem(this.activeKey, tab.sessionId);
    this.rememberSeenBell(tab);
    if (previous && previous !== tab) this.search.switchedFrom(previous);
    this.mobileTitle.textContent = tab.name;
    tab.ui.item.scrollIntoView({ block: 'nearest', inline: 'nearest' });
    this.updateFades();
    this.fitActive();
    // A terminal resized while hidden may have a cleared canvas (WebGL): draw it again.
    tab.terminal.refresh(0, tab.terminal.rows - 1);
    if (previous !== tab || document.activeElement === document.body) tab.terminal.focus();
    this.updateControls();
  }

  /** The tab's last bell was seen: a reload does not mark it again. */
  rememberSeenBell(tab) {
    if (tab.sessionId && tab.lastBellAt) sessionStorage.setItem(SEEN_BELL_KEY_PREFIX + tab.sessionId, tab.lastBellAt);
  }

  /**
   * A bell, a wait for input or an exit in a tab that is not the selected one marks it until it
   * is selected (a wait also until the session stops waiting).
   * @param {SessionTab} tab @param {'bell' | 'input' | 'exited'} kind
   */
  markAttention(tab, kind) {
    if (tab === this.active) this.rememberSeenBell(tab);
    if (tab === this.active || !this.tabs.includes(tab)) return;
    // An exit outranks the rest (it is the last thing the tab will say), a wait a bell; a bell
    // is kept under a wait, for when the wait ends unseen.
    if (attentionCame(tab, kind)) this.renderTab(tab);
  }

  /**
   * What a session's terminal does changed. One that starts waiting for input while its tab is
   * not shown (or the page is not looked at) marks its tab and, when this browser asked for it,
   * raises a system notification that opens the tab; one that stops waiting loses the mark.
   * @param {SessionTab} tab @param {string | null} previous
   */
  terminalStateChanged(tab, previous) {
    const waiting = tab.terminalState.state === 'waiting_for_input';
    if (waiting && previous !== 'waiting_for_input') {
      if (tab !== this.active) this.markAttention(tab, 'input');
      if (tab !== this.active || document.hidden) this.notifyWaiting(tab);
    } else if (!waiting) {
      // A bell the wait came with is still unseen: its mark comes back.
      waitEnded(tab);
    }
    this.renderTab(tab);
  }

  /** @param {SessionTab} tab */
  notifyWaiting(tab) {
    if (!waitingNotifications() || !('Notification' in window) || Notification.permission !== 'granted') return;
    const notification = new Notification(`${tab.name} is waiting for input`, {
      body: tab.terminalState.lastNotification?.text || this.instance.name,
      tag: `ptyhub-${tab.sessionId}`,
    });
    notification.onclick = () => {
      window.focus();
      this.activate(tab);
      notification.close();
    };
  }

  /** Turns the notifications on (asking the browser's permission first) or off, for this browser. */
  async toggleWaitingNotifications() {
    if (waitingNotifications()) {
      setWaitingNotifications(false);
    } else {
      const permission = await Notification.requestPermission();
      if (permission === 'granted') setWaitingNotifications(true);
      else this.showToast('The browser does not allow this page to show notifications');
    }
    this.notifyButton?.setAttribute('aria-pressed', String(waitingNotifications()));
  }

  step(direction) {
    if (!this.active || this.tabs.length < 2) return;
    const index = this.tabs.indexOf(this.active);
    this.activate(this.tabs[(index + direction + this.tabs.length) % this.tabs.length]);
  }

  tablistKey(event) {
    if (event.target.closest('input')) return;
    if (event.key === 'ArrowLeft' || event.key === 'ArrowRight') {
      if (event.altKey || event.ctrlKey || event.metaKey) return;
      event.preventDefault();
      this.step(event.key === 'ArrowLeft' ? -1 : 1);
      this.active?.ui.element.focus();
    }
  }

  get liveCount() {
    return this.tabs.filter((tab) => tab.live).length;
  }

  updateControls() {
    if (!this.newButton) return;
    const atCap = this.liveCount >= this.maxSessions;
    this.newButton.disabled = this.viewer || atCap || this.creating;
    const tip = this.viewer
      ? 'Read-only view: sessions cannot be created here'
      : atCap
        ? `Maximum of ${this.maxSessions} sessions reached for this instance: close one to open another`
        : 'New session (Alt+Shift+N)';
    this.newWrap.title = tip;
    this.newWrap.dataset.tooltip = tip;
    this.newButton.title = tip;
    this.restartButton.disabled = this.viewer || !this.active || !this.active.live;
    this.previousButton.disabled = this.tabs.length < 2;
    this.nextButton.disabled = this.tabs.length < 2;
    this.updateFades();
  }

  updateFades() {
    const { scrollLeft, scrollWidth, clientWidth } = this.tablist;
    this.tabsWrap.classList.toggle('fade-left', scrollLeft > 1);
    this.tabsWrap.classList.toggle('fade-right', scrollLeft + clientWidth < scrollWidth - 1);
  }

  showEmptyViewer() {
    this.panes.append(el('div', { class: 'empty' }, 'This instance has no live sessions to watch.'));
  }

  // ---- actions -----------------------------------------------------------------------------

  async createSession() {
    if (this.viewer || this.creating) return;
    if (this.liveCount >= this.maxSessions) {
      this.showToast(`Maximum of ${this.maxSessions} terminal sessions reached for this instance`);
      return;
    }
    this.creating = true;
    this.updateControls();
    try {
      const size = this.size ?? { cols: this.active?.terminal.cols ?? 80, rows: this.active?.terminal.rows ?? 24 };
      const created = await api.createSession(this.instanceId, size);
      // The change event may have brought the tab in before this answer did.
      let tab = this.tabs.find((candidate) => candidate.sessionId === created.id);
      if (!tab) {
        tab = this.makeTab({ session: created });
        this.addTab(tab);
        tab.connect();
      }
      this.activate(tab);
    } catch (error) {
      this.reportError(error);
      if (error instanceof ApiError && error.status === 409) await this.syncSessions();
    } finally {
      this.creating = false;
      this.updateControls();
    }
  }

  /** Adds tabs for live sessions that were created elsewhere (after a 409, for instance). */
  async syncSessions() {
    try {
      const sessions = await api.listSessions(this.instanceId);
      for (const session of sessions) this.followSession(session);
    } catch (error) {
      this.reportError(error);
    }
  }

  requestClose(tab) {
    if (this.viewer) return;
    if (!tab.hasLiveProcess) {
      this.closeTab(tab);
      return;
    }
    const { confirm, closeButton } = tab.ui;
    const cancel = () => {
      confirm.hidden = true;
      closeButton.hidden = false;
      tab.ui.item.classList.remove('confirming');
      tab.terminal.focus();
    };
    const yes = el('button', { type: 'button', class: 'danger', onclick: () => { cancel(); this.closeTab(tab); } }, 'Close');
    const no = el('button', { type: 'button', onclick: cancel }, 'Keep');
    confirm.replaceChildren(el('span', {}, 'End this session?'), yes, no);
    confirm.onkeydown = (event) => {
      event.stopPropagation();
      if (event.key === 'Escape') cancel();
    };
    closeButton.hidden = true;
    confirm.hidden = false;
    tab.ui.item.classList.add('confirming');
    tab.ui.item.scrollIntoView({ block: 'nearest', inline: 'nearest' });
    yes.focus();
  }

  async closeTab(tab) {
    if (tab.sessionId) {
      tab.closing = true;
      try {
        await api.closeSession(this.instanceId, tab.sessionId);
      } catch (error) {
        if (!(error instanceof ApiError && error.status === 404)) {
          tab.closing = false;
          this.reportError(error);
          return;
        }
      }
    }
    const wasLast = this.tabs.length === 1;
    this.removeTab(tab);
    if (wasLast) this.openFreshTab();
  }

  /** The page always has a tab: after the last one closes, a fresh session under this tab's client id. */
  openFreshTab() {
    const tab = this.makeTab({ session: null });
    this.addTab(tab);
    this.activate(tab);
    tab.connect();
  }

  async replace(tab) {
    const wasLast = this.tabs.length === 1;
    this.removeTab(tab);
    if (wasLast) this.openFreshTab();
    else await this.createSession();
  }

  /**
   * Restarts a tab's session: with the WebSocket's `reset` frame when the tab holds the session
   * open, as the protocol offers (the socket then says `resetting` and the new `connected`);
   * through REST when it does not (not attached yet, the process exited and the socket closed).
   */
  async restart(tab) {
    if (this.viewer || !tab.sessionId || !tab.live) return;
    if (tab.resetOverSocket()) {
      if (tab === this.active) tab.terminal.focus();
      return;
    }
    try {
      await api.resetSession(this.instanceId, tab.sessionId);
    } catch (error) {
      this.reportError(error);
      return;
    }
    if (tab.connectWhenShown) {
      tab.connectWhenShown = false;
      tab.exited = false;
      tab.connect();
    } else if (tab.exited || !tab.socket) {
      // No socket hears the reset: clear the final screen here, for the new process to draw on.
      tab.clearForRestart();
      tab.exited = false;
      tab.exitCode = null;
      tab.hideNotice();
      tab.setStatus(Status.connecting);
      tab.connect();
    }
    this.renderTab(tab);
    if (tab === this.active) tab.terminal.focus();
  }

  startRename(tab) {
    if (this.viewer || !tab.sessionId || tab.ui.name.querySelector('input')) return;
    const input = el('input', { class: 'rename-input', type: 'text', value: tab.name, 'aria-label': 'Session name', maxlength: '255' });
    let finished = false;
    const finish = async (commit) => {
      if (finished) return;
      finished = true;
      const wanted = input.value;
      tab.ui.name.textContent = tab.name;
      if (commit && wanted !== tab.name) {
        try {
          const renamed = await api.renameSession(this.instanceId, tab.sessionId, wanted);
          tab.name = renamed.name;
        } catch (error) {
          this.reportError(error);
        }
        this.renderTab(tab);
      }
      if (tab === this.active) tab.terminal.focus();
    };
    input.addEventListener('keydown', (event) => {
      event.stopPropagation();
      if (event.key === 'Enter') {
        event.preventDefault();
        finish(true);
      } else if (event.key === 'Escape') {
        event.preventDefault();
        finish(false);
      }
    });
    input.addEventListener('blur', () => finish(true));
    input.addEventListener('click', (event) => event.stopPropagation());
    input.addEventListener('dblclick', (event) => event.stopPropagation());
    tab.ui.name.replaceChildren(input);
    input.focus();
    input.select();
  }

  /** Copies a link that lets whoever opens it watch the active session, never type in it. */
  async shareReadOnly() {
    const tab = this.active;
    if (!tab?.sessionId) return;
    let share;
    try {
      share = await api.createShare(this.instanceId, tab.sessionId);
    } catch (error) {
      this.reportError(error);
      return;
    }
    const until = new Date(share.expires_at).toLocaleString();
    try {
      await navigator.clipboard.writeText(share.url);
      this.showToast(`Copied a read-only link to ${tab.name}, valid until ${until}`, 'info');
    } catch {
      // No clipboard (an insecure origin, a refused permission): show the link to copy by hand.
      this.showToast(`A read-only link to ${tab.name}, valid until ${until}: ${share.url}`, 'info');
    }
  }

  openViewer() {
    window.open(`/instances/${encodeURIComponent(this.instanceId)}?mode=view`, '_blank');
  }

  /**
   * The commands a tab's session keeps, for the prompts its terminal has drawn: after a
   * reconnect the replay draws prompts whose commands the change stream told while the tab was
   * away. A share link may not read commands (403), nor gets them on its change stream.
   * @param {SessionTab} tab
   */
  async loadCommands(tab) {
    if (this.viewerOnly || !tab.sessionId || tab.commandMarks.prompts.length === 0) return;
    try {
      for (const command of await api.listCommands(this.instanceId, tab.sessionId)) tab.commandMarks.command(command);
    } catch {
      // Marks are a help, not the terminal: the change stream brings the next commands anyway.
    }
  }

  /** @param {string} text @param {string} what */
  async copyText(text, what) {
    if (await writeToClipboard(text)) this.showToast(`Copied ${what}`, 'info');
    else this.showToast(`The browser did not let the page copy ${what}`);
  }

  /** Copies what a command printed, as the server kept it (plain text, escape sequences taken out). */
  async copyCommandOutput(/** @type {import('./api.js').CommandRecord} */ command) {
    const tab = this.active;
    if (!tab?.sessionId) return;
    let output;
    try {
      output = await api.commandOutput(this.instanceId, tab.sessionId, command.id);
    } catch (error) {
      this.reportError(error);
      return;
    }
    await this.copyText(output, `the output of ${command.command}`);
  }

  /** Types a command again at the shell's prompt, as the user would; not while a program runs. */
  runAgain(/** @type {import('./api.js').CommandRecord} */ command) {
    const tab = this.active;
    if (!tab || this.viewer) return;
    const state = tab.terminalState.state;
    if (state !== null && state !== 'at_prompt') {
      this.showToast('A program is running in this session: run the command again at the prompt');
      return;
    }
    tab.sendText(`${command.command}\r`);
    tab.terminal.focus();
  }

  // ---- keyboard ----------------------------------------------------------------------------

  /**
   * What is typed in a tab's terminal goes to its session (a latched Ctrl applied); typing clears
   * a passing status line and, on a phone, hides the header and tabs.
   */
  keyboardInput(tab, data) {
    const plain = this.keys.typed(tab, data);
    if (plain !== null) tab.sendText(plain);
    if (tab.statusLine.dataset.kind === 'transient') tab.hideStatusLine();
    if (isTouchLayout()) this.chrome.hide();
  }

  // ---- sizes -------------------------------------------------------------------------------

  /** The page is as tall as what the browser shows of it (less a phone's on-screen keyboard). */
  followVisualViewport() {
    const viewport = window.visualViewport;
    if (viewport) this.root.style.setProperty('--viewport-height', `${viewport.height}px`);
    this.scheduleFit();
  }

  scheduleFit() {
    if (this.fitFrame) return;
    this.fitFrame = requestAnimationFrame(() => {
      this.fitFrame = null;
      this.fitActive();
      this.updateFades();
    });
  }

  fitActive() {
    const size = this.active?.fit();
    if (!size) return;
    this.size = size;
    for (const tab of this.tabs) if (tab !== this.active) tab.resizeTo(size);
  }

  // ---- messages ----------------------------------------------------------------------------

  reportError(error) {
    if (error instanceof ApiError && error.status === 401) {
      this.onUnauthorized();
      return;
    }
    this.showToast(error instanceof ApiError ? error.detail : String(error?.message ?? error));
  }

  showToast(text, kind = 'error') {
    this.toast.replaceChildren(el('span', { class: 'toast-text' }, text),
      el('button', { type: 'button', class: 'toast-close', 'aria-label': 'Dismiss', onclick: () => { this.toast.hidden = true; } }, '×'));
    this.toast.dataset.kind = kind;
    this.toast.hidden = false;
    clearTimeout(this.toastTimer);
    this.toastTimer = setTimeout(() => { this.toast.hidden = true; }, TOAST_MS);
  }
}

/**
 * What a tab's session is doing, in words: its terminal state (CONTRACT.md "Terminal state"),
 * with the progress a program reports; '' before the server said.
 * @param {SessionTab} tab
 */
function terminalStateWords(tab) {
  const { state, progress } = tab.terminalState;
  switch (state) {
    case 'starting':
      return 'Starting';
    case 'at_prompt':
      return 'At the prompt';
    case 'running':
      return `Running${progressWords(progress)}`;
    case 'waiting_for_input':
      return 'Waiting for input';
    case 'idle':
      return 'Idle';
    case 'exited':
      return tab.exitCode === null || tab.exitCode === undefined ? 'Exited' : `Exited with code ${tab.exitCode}`;
    default:
      return '';
  }
}

/** @param {{ kind: string, percent: number | null } | null} progress */
function progressWords(progress) {
  if (!progress) return '';
  const percent = progress.percent === null ? '' : ` ${progress.percent} %`;
  if (progress.kind === 'error') return `, progress failed${percent ? ` at${percent}` : ''}`;
  if (progress.kind === 'paused') return `, paused${percent ? ` at${percent}` : ''}`;
  return percent ? `,${percent} done` : '';
}

/**
 * The tab's small badge for its terminal state: the percent of a running program's progress, a
 * glyph for the other states; '' for none (an exit has its own badge with the code).
 * @param {SessionTab} tab
 */
function terminalStateBadge(tab) {
  const { state, progress } = tab.terminalState;
  if (state === 'running') return typeof progress?.percent === 'number' ? `${progress.percent}%` : '…';
  if (state === 'waiting_for_input') return '?';
  if (state === 'idle') return 'zz';
  if (state === 'at_prompt') return '$';
  return '';
}
