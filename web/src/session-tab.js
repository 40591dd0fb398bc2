// One session tab: its xterm.js terminal (with xterm's own addons: WebGL rendering when the
// browser has it, Unicode 11 widths, links, search, OSC 52 clipboard), its WebSocket
// (CONTRACT.md "WebSocket (gateway)"), the snapshot that draws a fresh terminal, the offsets that
// make output appear exactly once after a reconnect, the window title and bell, and the notices
// drawn over its pane, and the predictive local echo over a slow link (local-echo.js).

import { Terminal } from '@xterm/xterm';
import { ClipboardAddon } from '@xterm/addon-clipboard';
import { FitAddon } from '@xterm/addon-fit';
import { SearchAddon } from '@xterm/addon-search';
import { Unicode11Addon } from '@xterm/addon-unicode11';
import { WebLinksAddon } from '@xterm/addon-web-links';
import { WebglAddon } from '@xterm/addon-webgl';
import { api } from './api.js';
import { CLOSE } from './close-codes.js';
import { CommandMarks } from './commands.js';
import { CursorBlink, ProgramCursorBlink } from './cursor-blink.js';
import { el } from './dom.js';
import { DecorationView, LocalEcho, xtermScreen } from './local-echo.js';
import { activeTheme, fontSize, gpuAcceleration, localEchoSettings, terminalTheme } from './settings.js';
import { sendWheelForTouchScrolling } from './touch.js';

/** The search highlights, per theme (`#RRGGBB`, as the search addon requires). */
const SEARCH_DECORATIONS = Object.freeze({
  dark: { matchBackground: '#4c566a', matchOverviewRuler: '#e5b94a', activeMatchBackground: '#b48a2a', activeMatchColorOverviewRuler: '#ffcc55' },
  light: { matchBackground: '#f3e3a3', matchOverviewRuler: '#a88400', activeMatchBackground: '#f0b429', activeMatchColorOverviewRuler: '#8a6d00' },
});

/** Where the tab's connection is: drives the dot on the tab and, with `ended`, the words. */
export const Status = Object.freeze({
  /** A tab the page added for a session made elsewhere: it attaches when first shown. */
  idle: 'idle',
  connecting: 'connecting',
  connected: 'connected',
  disconnected: 'disconnected',
  error: 'error',
  resetting: 'resetting',
  exited: 'exited',
});

/** @typedef {typeof Status[keyof typeof Status]} StatusName */

const BACKOFF_FIRST_MS = 500;
const BACKOFF_MAX_MS = 10_000;

const encoder = new TextEncoder();

/** The connection state in words once the tab no longer connects, by `SessionTab.ended`. */
const ENDED_WORDS = Object.freeze({
  taken_over: 'Taken over by another tab',
  expired: 'Session expired',
  closed: 'Session closed',
  unauthenticated: 'Sign-in refused',
  forbidden: 'Not allowed on this instance',
  cap_reached: 'Session limit reached',
});

/** @type {boolean | undefined} */
let hardwareWebgl2;

/** The renderers of software rasterizers: Chromium's SwiftShader, Mesa's, Windows'. */
const SOFTWARE_RENDERER = /swiftshader|llvmpipe|softpipe|software|basic render driver/i;

/**
 * Whether the browser draws WebGL2 on a GPU. A software rasterizer (SwiftShader in Chromium
 * without a GPU) sets up and draws on the main thread, which made a page load several times
 * slower than the DOM renderer there; headless Chromium offers it even to a context asked for
 * with `failIfMajorPerformanceCaveat`, so its renderer's name says. Asked once per page.
 */
function hasHardwareWebgl2() {
  if (hardwareWebgl2 === undefined) {
    const context = document.createElement('canvas')
      .getContext('webgl2', { failIfMajorPerformanceCaveat: true });
    if (context === null) {
      hardwareWebgl2 = false;
    } else {
      const info = context.getExtension('WEBGL_debug_renderer_info');
      const renderer = String(context.getParameter(info ? info.UNMASKED_RENDERER_WEBGL : context.RENDERER));
      hardwareWebgl2 = !SOFTWARE_RENDERER.test(renderer);
      context.getExtension('WEBGL_lose_context')?.loseContext();
    }
  }
  return hardwareWebgl2;
}

/**
 * What the tab knows about its session's output:
 * - `written`: the offset of the next byte not yet written to the terminal, or null while the
 *   terminal shows nothing from the server. A fresh terminal (a tab opened or reloaded) asks for
 *   a snapshot of the screen; one still mounted resumes with `since=written`, and output below
 *   it is never written again, so a reconnect shows nothing twice.
 * - `cursor`: the offset of the next byte the server sends on the current socket.
 * - `snapshotOffset`: set between a `snapshot` frame and its binary frame, the offset the
 *   snapshot stands for (its own bytes are not output and have no offsets).
 */
export class SessionTab {
  constructor({ instanceId, session, clientId, viewer, viewerOnly = false, size, callbacks }) {
    this.instanceId = instanceId;
    this.sessionId = session?.id ?? null;
    this.clientId = session ? null : clientId;
    this.name = session?.name ?? 'New session';
    this.viewer = viewer;
    /** Signed in with a share link: it may never ask for control. */
    this.viewerOnly = viewerOnly;
    this.callbacks = callbacks;
    /** @type {StatusName} */
    this.status = Status.connecting;
    this.role = null;
    /** Who is attached, as the session's record last said (CONTRACT.md "Presence"). */
    this.presence = session?.presence ?? [];
    /** To the controller: a viewer's pending request for control, `{id, requester}`. */
    this.controlRequest = null;
    /** Set while this tab's own request for control waits for an answer. */
    this.controlRequested = false;
    this.exitCode = session?.exit_code ?? null;
    this.exitSignal = null;
    this.exited = false;
    /** The window title the program set (OSC 0 or 2); the session list's until the terminal's own. */
    this.windowTitle = session?.title ?? '';
    /**
     * 'bell', 'input' or 'exited' while a tab in the background wants a look; the page sets and
     * clears it by the rules of src/attention.js.
     * @type {'bell' | 'input' | 'exited' | null}
     */
    this.attention = null;
    /** A bell rang while the tab was in the background and it was not shown since (src/attention.js). */
    this.bellUnseen = false;
    /** A key of ENDED_WORDS, or null while the tab connects: why the tab no longer connects. */
    this.ended = null;
    this.socket = null;
    this.disposed = false;
    this.reconnectAttempts = 0;
    this.reconnectTimer = null;
    this.cursor = 0;
    this.written = null;
    this.snapshotOffset = null;
    /** A gap's notice, written into the terminal unless a snapshot redraws it first. */
    this.pendingGapNotice = null;
    this.socketsOpened = 0;
    /** The term the search bar looks for in this tab, '' when it is closed. */
    this.searchTerm = '';
    /** The session's `last_bell_at` as the server last reported it (the list, the change stream). */
    this.lastBellAt = session?.last_bell_at ?? null;
    /** Set while this page closes the session itself, so its change event is not acted on twice. */
    this.closing = false;
    /** Between a reset's `resetting` and the new `connected`: the old process's output is dropped. */
    this.discardingOldOutput = false;
    /** A tab added for a session made elsewhere attaches when first shown. */
    this.connectWhenShown = false;
    /** A bell rang while the tab was not shown (before the page opened): mark it once added. */
    this.pendingBell = false;
    /** The tab strip's elements, which the page builds. @type {any} */
    this.ui = null;
    /** Inputs sent with an id whose `input_ack` has not come yet, by id. @type {Map<string, { resolve: (ack: any) => void, reject: (error: Error) => void }>} */
    this.pendingReceipts = new Map();
    this.inputSerial = 0;
    /**
     * What the session's terminal is doing, as the change stream last said (CONTRACT.md "Terminal
     * state"): `state`, `progress`, `last_notification`.
     * @type {{ state: string | null, progress: { kind: string, percent: number | null } | null, lastNotification: { text: string, at: string } | null }}
     */
    this.terminalState = { state: null, progress: null, lastNotification: null };

    /**
     * Whether the cursor blinks unless a program says otherwise: a viewer's stands still. Who
     * blinks it, see `setRenderer`.
     */
    this.cursorBlinks = !viewer;
    /** The DOM renderer's blink (cursor-blink.js); null with WebGL, where xterm blinks it. */
    this.cursorBlink = null;
    this.terminal = new Terminal({
      cursorBlink: false,
      disableStdin: viewer,
      fontFamily: '"DejaVu Sans Mono", "Menlo", "Consolas", monospace',
      fontSize: fontSize(),
      scrollback: 5000,
      // The Unicode version switch is a proposed API.
      allowProposedApi: true,
      theme: terminalTheme(),
    });
    this.fitAddon = new FitAddon();
    this.terminal.loadAddon(this.fitAddon);
    // Unicode 11 widths: emoji and CJK take the two columns programs (and the server's
    // emulator) give them.
    this.terminal.loadAddon(new Unicode11Addon());
    this.terminal.unicode.activeVersion = '11';
    this.terminal.loadAddon(new WebLinksAddon((event, uri) => {
      event.preventDefault();
      window.open(uri, '_blank', 'noopener,noreferrer');
    }));
    this.searchAddon = new SearchAddon();
    this.terminal.loadAddon(this.searchAddon);
    // OSC 52 from programs (tmux, vim): a write goes to the page, which copies only what the
    // user's setting or answer allows (clipboard.js); a read gets nothing, so nothing the user
    // copied elsewhere leaks into a session. A viewer watches someone else's session: its
    // programs do not reach the viewer's clipboard at all.
    if (!viewer) {
      this.terminal.loadAddon(new ClipboardAddon(undefined, {
        readText: () => '',
        writeText: (_selection, text) => this.callbacks.onClipboardWrite(this, text),
      }));
      // A program's request to read the clipboard (`?`) is not answered at all: an empty answer
      // would arrive at the program as typed input. Handlers registered later run first, and
      // `false` hands every other OSC 52 on to the addon.
      this.terminal.parser.registerOscHandler(52, (data) => data.split(';')[1] === '?');
    }
    /** @type {'webgl' | 'dom'} */
    this.renderer = 'dom';
    // What the programs ask of the cursor's blink, for the DOM renderer's blink to follow. Mode
    // 12 sets xterm's own option, which a reset puts back to what the renderer needs.
    this.programCursorBlink = new ProgramCursorBlink(this.terminal.parser, {
      defaultBlinks: this.cursorBlinks,
      onChange: (blinks) => this.cursorBlink?.setWanted(blinks),
      onReset: () => {
        this.terminal.options.cursorBlink = this.xtermBlinksCursor;
      },
    });
    if (size) this.terminal.resize(size.cols, size.rows);

    this.host = el('div', { class: 'term-host' });
    this.statusLine = el('div', { class: 'pane-status', role: 'status', hidden: true });
    // The connection state in words, for assistive technology: the dot on the tab says it only
    // by colour. A hidden pane hides its region too, so only the shown tab's changes are spoken;
    // the tab itself points at its region (aria-describedby), so every tab's state can be heard.
    this.stateRegion = el('div', {
      class: 'pane-state visually-hidden', role: 'status', 'aria-live': 'polite', 'aria-atomic': 'true',
      'aria-label': 'Connection',
    }, this.stateText);
    this.banner = el('div', { class: 'pane-banner', role: 'alert', hidden: true });
    this.notice = el('div', { class: 'pane-notice', hidden: true });
    this.pane = el('section', { class: 'pane', role: 'tabpanel', hidden: true },
      this.banner, this.host, this.statusLine, this.notice, this.stateRegion);
    this.terminal.open(this.host);
    this.followCursorBlinkConditions();
    this.useWebgl();
    // For the browser tests and tools: the pane's terminal, to read its buffer as xterm holds it.
    Object.defineProperty(this.pane, 'xterm', { value: this.terminal });
    // For the browser tests and tools: the DOM renderer's blink, whether it runs.
    Object.defineProperty(this.pane, 'cursorBlink', { get: () => this.cursorBlink });
    /** Typed keys drawn at once over a slow link; a viewer types nothing. */
    this.localEcho = viewer ? null : new LocalEcho({
      screen: xtermScreen(this.terminal),
      view: new DecorationView(this.terminal),
      settings: localEchoSettings,
    });
    if (this.localEcho) Object.defineProperty(this.pane, 'localEcho', { value: this.localEcho });
    /** The prompts in the scrollback and the commands that ran at them (commands.js). */
    this.commandMarks = new CommandMarks({
      terminal: this.terminal,
      onMarkClicked: (prompt, element) => this.callbacks.onCommandMark(this, prompt, element),
    });
    // For the browser tests and tools: the marks as lines, commands and outcomes.
    Object.defineProperty(this.pane, 'commandMarks', { get: () => this.commandMarks.describe() });
    sendWheelForTouchScrolling(this.host, this.terminal);

    this.terminal.onData((data) => {
      this.cursorBlink?.typed();
      this.callbacks.onKeyboardInput(this, data);
    });
    // Binary input (X10 mouse reports) is never printable: it ends prediction.
    this.terminal.onBinary((data) => {
      if (this.canWrite) this.localEcho?.input(data);
      this.sendBytes(latin1ToBytes(data));
    });
    this.terminal.onResize(({ cols, rows }) => {
      this.localEcho?.reset();
      this.sendResize(cols, rows);
    });
    // A full-screen program took over (or left): predictions made on the other screen are void.
    this.terminal.buffer.onBufferChange(() => this.localEcho?.reset());
    this.terminal.attachCustomKeyEventHandler((event) => this.callbacks.terminalKeyAllowed(event));
    this.terminal.onTitleChange((title) => {
      this.windowTitle = title;
      this.changed();
    });
    this.terminal.onBell(() => this.callbacks.onAttention(this, 'bell'));
    this.searchAddon.onDidChangeResults((results) => this.callbacks.onSearchResults(this, results));
  }

  /**
   * Draws with WebGL when the browser offers it on a GPU (many live terminals stay smooth), else
   * with xterm's DOM renderer, which is also where a lost WebGL context falls back to; the
   * `gpuAcceleration` setting can ask for WebGL on a software rasterizer too, or never. The pane
   * says which in `data-renderer`.
   */
  useWebgl() {
    const wanted = gpuAcceleration();
    if (wanted === 'off' || (wanted === 'auto' && !hasHardwareWebgl2())) {
      this.setRenderer('dom');
      return;
    }
    let addon = null;
    try {
      addon = new WebglAddon();
      addon.onContextLoss(() => {
        addon?.dispose();
        this.setRenderer('dom');
      });
      this.terminal.loadAddon(addon);
      this.setRenderer('webgl');
    } catch {
      // No WebGL2 here (no GPU, disabled, blocked): the DOM renderer stays.
      addon?.dispose();
      this.setRenderer('dom');
    }
  }

  /**
   * Takes `renderer` and the cursor's blink that goes with it: xterm's own with WebGL (a timer
   * that draws the cursor), this page's with the DOM renderer, whose own blink is a CSS animation
   * that makes every key's echo wait a frame (cursor-blink.js says why).
   * @param {'webgl' | 'dom'} renderer
   */
  setRenderer(renderer) {
    this.renderer = renderer;
    this.pane.dataset.renderer = renderer;
    this.terminal.options.cursorBlink = this.xtermBlinksCursor;
    if (renderer === 'dom') {
      this.cursorBlink ??= new CursorBlink(this.host);
      this.cursorBlink.setWanted(this.programCursorBlink.blinks);
      this.cursorBlink.setShown(!this.pane.hidden);
      this.cursorBlink.setFocused(document.activeElement === this.terminal.textarea);
    } else {
      this.cursorBlink?.dispose();
      this.cursorBlink = null;
    }
  }

  /**
   * xterm's own `cursorBlink` option as the page sets it: on with WebGL for a cursor that blinks,
   * off with the DOM renderer, where the option marks the cursor for xterm's CSS animation. A
   * program's mode 12 sets the option until a reset puts this back; style.css cancels the
   * animation meanwhile.
   */
  get xtermBlinksCursor() {
    return this.cursorBlinks && this.renderer === 'webgl';
  }

  /**
   * Tells the DOM renderer's blink when the terminal gains or loses focus and when its pane is
   * shown or hidden (by the page, through `hidden`): a blink that cannot be seen does not run.
   */
  followCursorBlinkConditions() {
    this.terminal.textarea?.addEventListener('focus', () => this.cursorBlink?.setFocused(true));
    this.terminal.textarea?.addEventListener('blur', () => this.cursorBlink?.setFocused(false));
    this.paneShownObserver = new MutationObserver(() => this.cursorBlink?.setShown(!this.pane.hidden));
    this.paneShownObserver.observe(this.pane, { attributes: true, attributeFilter: ['hidden'] });
  }

  /** Applies the remembered font size and the theme in effect; returns whether the size changed. */
  applySettings() {
    const size = fontSize();
    const resized = this.terminal.options.fontSize !== size;
    if (resized) this.terminal.options.fontSize = size;
    this.terminal.options.theme = terminalTheme();
    // The predictions' colours and size are the terminal's: draw them anew.
    this.localEcho?.reset();
    if (this.searchTerm) this.find(this.searchTerm, 'next', { incremental: true });
    return resized;
  }

  // ---- search in the scrollback -------------------------------------------------------------

  /**
   * Finds `term` in the scrollback and screen, forwards or backwards from the current match, and
   * selects it; every match is highlighted. Returns whether there was one.
   * @param {string} term
   * @param {'next' | 'previous'} direction
   * @param {{ incremental?: boolean }} [options]
   */
  find(term, direction, { incremental = false } = {}) {
    this.searchTerm = term;
    if (term === '') {
      this.searchAddon.clearDecorations();
      this.terminal.clearSelection();
      return false;
    }
    const options = { decorations: SEARCH_DECORATIONS[activeTheme()], incremental };
    return direction === 'next' ? this.searchAddon.findNext(term, options) : this.searchAddon.findPrevious(term, options);
  }

  endSearch() {
    this.searchTerm = '';
    this.searchAddon.clearDecorations();
  }

  /** Applies what the instance's session-change stream says the session is now. */
  applyRecord(/** @type {import('./api.js').SessionRecord} */ session) {
    let changed = false;
    if (session.name && session.name !== this.name) {
      this.name = session.name;
      changed = true;
    }
    if (typeof session.title === 'string' && session.title !== this.windowTitle && session.title !== '') {
      this.windowTitle = session.title;
      changed = true;
    }
    // A tab not yet attached learns its session's state from the record alone.
    if (this.socketsOpened === 0 && session.status === 'exited' && !this.exited) {
      this.exited = true;
      this.exitCode = session.exit_code ?? null;
      this.exitSignal = session.exit_signal ?? null;
      this.status = Status.exited;
      changed = true;
    }
    if (session.last_bell_at && session.last_bell_at !== this.lastBellAt) {
      this.lastBellAt = session.last_bell_at;
      this.callbacks.onAttention(this, 'bell');
    }
    if (Array.isArray(session.presence) && JSON.stringify(session.presence) !== JSON.stringify(this.presence)) {
      this.presence = session.presence;
      changed = true;
    }
    if (this.applyTerminalState(session)) changed = true;
    if (changed) this.changed();
  }

  /** Whether this tab may ask for control: it views, connected, on a page that may control. */
  get mayRequestControl() {
    return !this.viewerOnly && this.role === 'viewer' && this.socket?.readyState === WebSocket.OPEN && !this.exited;
  }

  /** Asks the controller for control; the answer comes as a `role` or `control_declined` frame. */
  requestControl() {
    if (!this.mayRequestControl || this.controlRequested) return;
    this.controlRequested = true;
    this.sendJson({ type: 'request_control' });
    this.showStatusLine('Asked for control…');
    this.changed();
  }

  /** The controller's answer to the pending request. */
  answerControl(grant) {
    const request = this.controlRequest;
    if (!request) return;
    this.controlRequest = null;
    this.sendJson({ type: grant ? 'grant_control' : 'decline_control', request_id: request.id });
    this.changed();
  }

  /**
   * Takes the record's `state`, `progress` and `last_notification`; tells the page when `state`
   * changed (a background session that starts waiting for input wants a look). Returns whether
   * anything the tab shows changed.
   * @param {import('./api.js').SessionRecord} session
   */
  applyTerminalState(session) {
    if (typeof session.state !== 'string') return false;
    const previous = this.terminalState;
    const next = { state: session.state, progress: session.progress ?? null, lastNotification: session.last_notification ?? null };
    const same = previous.state === next.state
      && JSON.stringify(previous.progress) === JSON.stringify(next.progress)
      && JSON.stringify(previous.lastNotification) === JSON.stringify(next.lastNotification);
    if (same) return false;
    this.terminalState = next;
    if (session.state === 'exited' && typeof session.exit_code === 'number') this.exitCode = session.exit_code;
    if (previous.state !== next.state) this.callbacks.onTerminalState(this, previous.state);
    return true;
  }

  get live() {
    return !this.ended && !this.disposed;
  }

  /** Whether closing should ask first: the session still has a running process. */
  get hasLiveProcess() {
    return this.live && !this.exited;
  }

  /** The connection state as a person reads it: "Connected", "Reconnecting…", and so on. */
  get stateText() {
    if (this.ended) return ENDED_WORDS[this.ended];
    switch (this.status) {
      case Status.idle:
        return 'Not connected yet: attaches when shown';
      case Status.connecting:
        return 'Connecting…';
      case Status.connected:
        return this.viewer ? 'Connected, read-only' : 'Connected';
      case Status.disconnected:
        return 'Reconnecting…';
      case Status.resetting:
        return 'Restarting…';
      case Status.exited:
        if (this.exitSignal !== null) return `Session ended (signal ${this.exitSignal})`;
        return this.exitCode === null ? 'Session ended' : `Session ended (exit code ${this.exitCode})`;
      default:
        return 'Disconnected';
    }
  }

  // ---- connection -------------------------------------------------------------------------

  connect() {
    if (this.disposed) return;
    clearTimeout(this.reconnectTimer);
    this.reconnectTimer = null;
    this.ended = null;
    this.closeSocket();
    const query = new URLSearchParams();
    if (!this.sessionId) query.set('client_id', this.clientId);
    // A fresh terminal gets the screen drawn; one that shows output gets what it missed.
    if (this.written === null) query.set('snapshot', '1');
    else query.set('since', String(this.written));
    this.snapshotOffset = null;
    this.pendingGapNotice = null;
    this.discardingOldOutput = false;
    this.localEcho?.reset();
    if (!this.viewer) {
      query.set('cols', String(this.terminal.cols));
      query.set('rows', String(this.terminal.rows));
    } else {
      query.set('mode', 'view');
    }
    const socket = new WebSocket(api.terminalSocketUrl(this.instanceId, this.sessionId, query));
    socket.binaryType = 'arraybuffer';
    this.socket = socket;
    this.socketsOpened += 1;
    this.setStatus(this.reconnectAttempts > 0 ? Status.disconnected : Status.connecting);
    socket.onmessage = (event) => {
      if (socket !== this.socket) return;
      if (typeof event.data === 'string') this.handleMessage(event.data);
      else if (this.snapshotOffset !== null) this.handleSnapshot(new Uint8Array(event.data));
      else {
        this.flushGapNotice();
        this.handleOutput(new Uint8Array(event.data));
      }
    };
    socket.onclose = (event) => {
      if (socket !== this.socket) return;
      this.socket = null;
      this.failPendingReceipts('the connection was lost');
      this.handleClose(event.code, event.reason);
    };
  }

  /**
   * The session was closed on the server while this tab was away from it (reconnecting, or told
   * already that it expired): say so as a NOT_FOUND close does, rather than drop the tab the user
   * was waiting on. False for a tab that is attached, idle or ended otherwise, which the page
   * removes.
   */
  closedWhileAway() {
    if (this.disposed) return false;
    if (this.ended === 'expired') return true;
    if (this.ended || this.exited || this.status !== Status.disconnected) return false;
    clearTimeout(this.reconnectTimer);
    this.reconnectTimer = null;
    this.closeSocket();
    this.handleClose(CLOSE.NOT_FOUND, '');
    return true;
  }

  /** Reconnects now, after a manual action (take back, restart) or the network coming back. */
  reconnectNow() {
    if (this.disposed || this.ended || this.exited) return;
    if (this.reconnectTimer !== null || this.socket === null) {
      this.reconnectAttempts = Math.max(this.reconnectAttempts, 1);
      this.connect();
    }
  }

  takeBack() {
    this.hideBanner();
    this.reconnectAttempts = 0;
    this.connect();
  }

  closeSocket() {
    const socket = this.socket;
    this.socket = null;
    this.failPendingReceipts('the connection was closed');
    if (socket && socket.readyState <= WebSocket.OPEN) socket.close(CLOSE.NORMAL, 'tab closed');
  }

  dispose() {
    this.disposed = true;
    clearTimeout(this.reconnectTimer);
    this.closeSocket();
    this.localEcho?.dispose();
    this.cursorBlink?.dispose();
    this.paneShownObserver.disconnect();
    this.terminal.dispose();
    this.pane.remove();
  }

  handleMessage(text) {
    let message;
    try {
      message = JSON.parse(text);
    } catch {
      return;
    }
    if (message.type !== 'snapshot') this.flushGapNotice();
    switch (message.type) {
      case 'status':
        if (message.status === 'connected') this.handleConnected(message);
        else if (message.status === 'resetting') {
          // The server's screen is cleared for the new process: so is this one, and the notice
          // goes above the terminal rather than into it. What the old process still printed
          // arrives until the new `connected`; it is not drawn, and the screen is cleared again
          // when the new process starts.
          this.clearForRestart();
          this.discardingOldOutput = true;
          this.setStatus(Status.resetting);
          this.showStatusLine('Restarting the session…');
        }
        break;
      case 'gap': {
        this.cursor += Number(message.lost) || 0;
        const lost = `${message.lost} bytes of output were lost while disconnected`;
        // In the terminal only if raw output follows: a snapshot redraws the screen instead.
        this.pendingGapNotice = lost;
        // The replay that follows can scroll the notice away at once; say it above the terminal
        // too, until the user types.
        this.showStatusLine(lost);
        this.statusLine.dataset.kind = 'transient';
        break;
      }
      case 'snapshot':
        // Its bytes come in the next binary frame; the output after them starts at `offset`.
        this.pendingGapNotice = null;
        this.snapshotOffset = Number(message.offset) || 0;
        break;
      case 'resize':
        // The controller's own size drives the PTY; a viewer follows whatever the PTY has.
        if (this.viewer && message.cols > 0 && message.rows > 0) this.terminal.resize(message.cols, message.rows);
        break;
      case 'ping':
        this.sendJson({ type: 'pong' });
        break;
      case 'session_detached':
        this.ended = 'taken_over';
        this.changed();
        break;
      case 'control_requested':
        this.controlRequest = { id: message.request_id, requester: message.requester ?? null };
        this.changed();
        break;
      case 'control_declined':
        this.controlRequested = false;
        this.showStatusLine('Your request for control was declined');
        this.statusLine.dataset.kind = 'transient';
        this.changed();
        break;
      case 'role':
        // A grant moved control on this socket: the tab now types, or only watches.
        this.role = message.role;
        this.terminal.options.disableStdin = message.role !== 'controller';
        this.controlRequested = false;
        this.controlRequest = null;
        this.showStatusLine(message.role === 'controller' ? 'You have control' : 'You gave control away');
        this.statusLine.dataset.kind = 'transient';
        this.changed();
        break;
      case 'exit':
        this.handleExit(message.code, message.signal);
        break;
      case 'input_ack':
        this.settleReceipt(message.id, (pending) => pending.resolve(message));
        break;
      case 'error':
        // A refused input with an id is its key's failure to show, not a notice in the terminal.
        if (typeof message.id === 'string' && this.pendingReceipts.has(message.id)) {
          this.settleReceipt(message.id, (pending) => pending.reject(new Error(String(message.message))));
        } else {
          this.writeNotice(`server: ${message.message}`);
        }
        break;
      default:
        break;
    }
  }

  handleConnected(message) {
    const wasResetting = this.status === Status.resetting;
    if (this.discardingOldOutput) {
      this.discardingOldOutput = false;
      this.clearForRestart();
    }
    if (message.session?.id) this.sessionId = message.session.id;
    if (message.session?.name) this.name = message.session.name;
    this.role = message.role;
    this.cursor = Number(message.offset) || 0;
    this.exited = false;
    this.ended = null;
    this.reconnectAttempts = 0;
    this.hideStatusLine();
    this.hideNotice();
    this.hideBanner();
    if (wasResetting) {
      this.showStatusLine('Session restarted');
      this.statusLine.dataset.kind = 'transient';
    }
    if (this.viewer && message.cols > 0 && message.rows > 0) {
      this.terminal.resize(message.cols, message.rows);
    } else if (!this.viewer && (message.cols !== this.terminal.cols || message.rows !== this.terminal.rows)) {
      this.sendResize(this.terminal.cols, this.terminal.rows);
    }
    this.setStatus(Status.connected);
    this.changed();
    this.callbacks.onConnected(this);
  }

  /**
   * Clears the screen and the scrollback for a restarted process to draw on. Through the write
   * queue: output of the old process still queued is drawn before, never after, the clearing.
   */
  clearForRestart() {
    this.localEcho?.reset();
    this.commandMarks.clear();
    this.terminal.write('\x1bc\x1b[3J');
  }

  /** The screen as of `snapshotOffset`, for a terminal reset first; output goes on from there. */
  handleSnapshot(bytes) {
    const offset = this.snapshotOffset;
    this.snapshotOffset = null;
    this.localEcho?.reset();
    this.commandMarks.clear();
    this.terminal.reset();
    // The reset forgot the cursor's style the programs set (RIS does the same through the parser).
    this.programCursorBlink.reset();
    this.commandMarks.writtenWithoutOffsets();
    this.terminal.write(bytes, () => {
      this.commandMarks.snapshotDrawn(offset);
      this.commandMarks.parsed(offset);
    });
    this.cursor = offset;
    this.written = offset;
  }

  handleOutput(bytes) {
    const start = this.cursor;
    const end = start + bytes.length;
    this.cursor = end;
    // With nothing written yet (a server that sent raw bytes, not a snapshot) all of it is new.
    const written = this.written ?? start;
    if (end <= written) return;
    const fresh = start < written ? bytes.subarray(written - start) : bytes;
    this.written = end;
    // The old process's last words after a reset began: the new one gets a clean screen.
    if (this.discardingOldOutput) return;
    this.cursorBlink?.output();
    const seq = this.localEcho?.receivedOutput();
    this.commandMarks.written(fresh, end - fresh.length);
    this.terminal.write(fresh, () => {
      if (seq !== undefined) this.localEcho?.drawnOutput(seq);
      this.commandMarks.parsed(end);
    });
  }

  flushGapNotice() {
    if (this.pendingGapNotice === null) return;
    this.writeNotice(this.pendingGapNotice);
    this.pendingGapNotice = null;
  }

  handleExit(code, signal) {
    this.exited = true;
    this.exitCode = code ?? null;
    this.exitSignal = signal ?? null;
    const how = signal !== null && signal !== undefined ? `signal ${signal}` : `code ${code}`;
    this.writeNotice(`process exited with ${how}`);
    this.setStatus(Status.exited);
    this.showNotice(`Process exited with ${how}.`, this.viewer ? [] : [
      { label: 'Restart', onClick: () => this.callbacks.onRestart(this) },
    ]);
    this.changed();
    this.callbacks.onAttention(this, 'exited');
  }

  handleClose(code, reason) {
    if (this.disposed) return;
    switch (code) {
      case CLOSE.TAKEN_OVER:
        this.ended = 'taken_over';
        this.setStatus(Status.error);
        this.showBanner('This session is open elsewhere: another window took control of it.',
          this.viewer ? null : { label: 'Take back', onClick: () => this.takeBack() });
        break;
      case CLOSE.NOT_FOUND:
        this.ended = 'expired';
        this.setStatus(Status.error);
        this.showNotice('Session expired: it is no longer running on the server.', this.viewer ? [] : [
          { label: 'Start a new session', onClick: () => this.callbacks.onReplace(this) },
        ]);
        break;
      case CLOSE.UNAUTHENTICATED:
        this.ended = 'unauthenticated';
        this.setStatus(Status.error);
        this.callbacks.onUnauthorized();
        break;
      case CLOSE.FORBIDDEN:
        this.ended = 'forbidden';
        this.setStatus(Status.error);
        this.showNotice(`Not allowed: ${reason || 'this credential may not use this instance'}.`, []);
        break;
      case CLOSE.CAP_REACHED:
        this.ended = 'cap_reached';
        this.setStatus(Status.error);
        this.showNotice(reason || 'The instance has reached its maximum number of sessions.', [
          { label: 'Try again', onClick: () => this.connect() },
        ]);
        break;
      case CLOSE.NORMAL:
        if (this.exited) break;
        if (this.ended === 'taken_over') {
          this.handleClose(CLOSE.TAKEN_OVER, reason);
          break;
        }
        this.ended = 'closed';
        this.setStatus(Status.error);
        this.showNotice('This session was closed.', this.viewer ? [] : [
          { label: 'Start a new session', onClick: () => this.callbacks.onReplace(this) },
        ]);
        break;
      case CLOSE.SERVICE_RESTART:
        // A rolling restart of the gateway: another replica answers at once, so start the
        // backoff over (it still has jitter, so every tab does not come back at the same moment).
        this.reconnectAttempts = 0;
        this.scheduleReconnect('Server restarting: reconnecting');
        break;
      default:
        // BACKEND_FAILURE, TOO_BIG and any other close (a dropped connection, 1006) reconnect
        // with backoff, unless the tab was taken over already.
        if (this.ended === 'taken_over') {
          this.handleClose(CLOSE.TAKEN_OVER, reason);
          break;
        }
        this.scheduleReconnect();
    }
    this.changed();
  }

  scheduleReconnect(why = 'Connection lost: reconnecting') {
    const attempt = this.reconnectAttempts;
    this.reconnectAttempts += 1;
    const ceiling = Math.min(BACKOFF_MAX_MS, BACKOFF_FIRST_MS * 2 ** attempt);
    const delay = ceiling / 2 + Math.random() * (ceiling / 2);
    this.setStatus(Status.disconnected);
    this.showStatusLine(`${why} (attempt ${attempt + 1})…`);
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = null;
      this.connect();
    }, delay);
  }

  // ---- input and size -----------------------------------------------------------------------

  get canWrite() {
    return this.role === 'controller' && this.socket?.readyState === WebSocket.OPEN && !this.exited;
  }

  sendText(text) {
    if (this.canWrite) this.localEcho?.input(text);
    this.sendBytes(encoder.encode(text));
  }

  sendBytes(bytes) {
    if (this.canWrite) this.socket.send(bytes);
  }

  /**
   * Sends `text` as an `input` frame with an id, resolving with the `input_ack` once the server
   * wrote it to the program. Rejects when the server refuses it (an `error` frame with the id),
   * when the socket closes first, or at once when this tab cannot type here.
   * @param {string} text
   * @returns {Promise<any>}
   */
  sendWithReceipt(text) {
    if (!this.canWrite) {
      return Promise.reject(new Error(this.viewer ? 'this view is read-only' : 'the session is not connected'));
    }
    this.localEcho?.input(text);
    this.inputSerial += 1;
    const id = `key-${this.inputSerial}`;
    const receipt = new Promise((resolve, reject) => this.pendingReceipts.set(id, { resolve, reject }));
    this.socket.send(JSON.stringify({ type: 'input', data: text, id }));
    return receipt;
  }

  /** @param {unknown} id @param {(pending: { resolve: (ack: any) => void, reject: (error: Error) => void }) => void} settle */
  settleReceipt(id, settle) {
    if (typeof id !== 'string') return;
    const pending = this.pendingReceipts.get(id);
    if (!pending) return;
    this.pendingReceipts.delete(id);
    settle(pending);
  }

  /** Inputs still waiting for their receipt when the socket goes will get none: they failed. */
  failPendingReceipts(/** @type {string} */ why) {
    for (const pending of this.pendingReceipts.values()) pending.reject(new Error(why));
    this.pendingReceipts.clear();
  }

  /**
   * Resets the session through the open socket (`{"type":"reset"}`), as the WebSocket protocol
   * offers; false when there is no open socket of a controller to send it on.
   */
  resetOverSocket() {
    if (!this.canWriteControl) return false;
    this.socket.send(JSON.stringify({ type: 'reset' }));
    return true;
  }

  /** An open socket on which this tab holds control (a process that exited can still be reset). */
  get canWriteControl() {
    return !this.viewer && this.role === 'controller' && this.socket?.readyState === WebSocket.OPEN;
  }

  sendJson(value) {
    if (this.socket?.readyState === WebSocket.OPEN) this.socket.send(JSON.stringify(value));
  }

  sendResize(cols, rows) {
    if (!this.viewer && this.role === 'controller' && !this.exited) this.sendJson({ type: 'resize', cols, rows });
  }

  /** Fits the terminal to its (visible) pane; the new size is sent through `onResize`. */
  fit() {
    if (this.pane.hidden || this.disposed) return null;
    const proposed = this.fitAddon.proposeDimensions();
    if (!proposed || !Number.isFinite(proposed.cols) || !Number.isFinite(proposed.rows)) return null;
    const cols = Math.max(2, proposed.cols);
    const rows = Math.max(1, proposed.rows);
    if (this.viewer) return { cols, rows };
    if (cols !== this.terminal.cols || rows !== this.terminal.rows) this.terminal.resize(cols, rows);
    return { cols, rows };
  }

  /** Gives a hidden terminal the size of the visible one, so switching to it needs no reflow. */
  resizeTo({ cols, rows }) {
    if (this.viewer || this.disposed) return;
    if (cols !== this.terminal.cols || rows !== this.terminal.rows) this.terminal.resize(cols, rows);
  }

  // ---- what the pane shows ------------------------------------------------------------------

  setStatus(status) {
    if (this.status === status) return;
    this.status = status;
    this.changed();
  }

  /**
   * Puts the state's words in the status region and tells the page. The text is replaced only
   * when the words change, so a screen reader does not say the same state twice.
   */
  changed() {
    const text = this.stateText;
    if (this.stateRegion.textContent !== text) this.stateRegion.textContent = text;
    this.callbacks.onChange(this);
  }

  /** A one-line notice in the terminal itself, dimmed so it is not mistaken for output. */
  writeNotice(text) {
    this.terminal.write(`\r\n\x1b[2;33m[ptyhub] ${text}\x1b[0m\r\n`);
  }

  showStatusLine(text) {
    delete this.statusLine.dataset.kind;
    this.statusLine.textContent = text;
    this.statusLine.hidden = false;
  }

  hideStatusLine() {
    this.statusLine.hidden = true;
  }

  showBanner(text, action) {
    this.banner.replaceChildren(el('span', {}, text));
    if (action) this.banner.append(el('button', { type: 'button', onclick: action.onClick }, action.label));
    this.banner.hidden = false;
  }

  hideBanner() {
    this.banner.hidden = true;
  }

  showNotice(text, actions) {
    this.notice.replaceChildren(el('span', { class: 'notice-text' }, text),
      ...actions.map((action) => el('button', { type: 'button', onclick: action.onClick }, action.label)));
    this.notice.hidden = false;
  }

  hideNotice() {
    this.notice.hidden = true;
  }

  /** The terminal's text (scrollback and screen), for the copy view. */
  bufferText() {
    const buffer = this.terminal.buffer.active;
    const lines = [];
    for (let index = 0; index < buffer.length; index += 1) {
      lines.push(buffer.getLine(index)?.translateToString(true) ?? '');
    }
    while (lines.length > 0 && lines[lines.length - 1] === '') lines.pop();
    return lines.join('\n');
  }
}

function latin1ToBytes(text) {
  const bytes = new Uint8Array(text.length);
  for (let index = 0; index < text.length; index += 1) bytes[index] = text.charCodeAt(index) & 0xff;
  return bytes;
}
