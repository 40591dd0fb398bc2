// Commands in the scrollback: a mark in the gutter at each prompt whose command ran, coloured by
// its exit code, with the command line and duration in its tooltip; jumping to the previous and
// next command; a menu on a mark to copy the command or its output, or to run it again.
//
// Where a prompt is comes from the shell integration's marks in the output (OSC 133 or 633 `A`,
// CONTRACT.md "Commands and terminal state"): xterm's parser calls us at the mark, when the
// cursor is on the prompt's line, and an xterm marker keeps that line as the scrollback moves.
// What ran there comes from the server's commands (the change stream's `command_started` and
// `command_finished`, and `GET .../commands`), matched by offset: a command belongs to the last
// prompt before its output's first byte. To know a prompt's offset, each chunk of output is
// scanned for the marks before xterm parses it, and xterm's handler takes the offsets of the
// chunk being parsed in order. A snapshot carries no marks, so the prompts drawn before a tab
// attached get none, but for the line its cursor is on: a command typed there after the attach
// (the shell at the prompt the snapshot shows, as after every reload) gets its mark there.

import { el } from './dom.js';

/** @typedef {import('./api.js').CommandRecord} CommandRecord */
/** @typedef {import('@xterm/xterm').Terminal} Terminal */
/** @typedef {import('@xterm/xterm').IMarker} IMarker */
/** @typedef {import('@xterm/xterm').IDecoration} IDecoration */

/**
 * A prompt the terminal drew: its offset in the session's output, the marker on its line, the
 * command that ran at it once known, and its mark's decoration once drawn.
 * @typedef {{ offset: number, marker: IMarker, command: CommandRecord | null, decoration: IDecoration | null }} Prompt
 */

/** The OSC numbers whose `A` starts a prompt: FinalTerm's 133 and VS Code's 633. */
const PROMPT_OSC = [133, 633];
/** An OSC body longer than this is not a prompt mark; only its start is kept. */
const OSC_BODY_KEPT = 16;
/**
 * How many reported commands wait for their output to be parsed. A tab not attached yet parses
 * nothing while its session's commands are reported: the oldest are let go.
 */
const WAITING_KEPT = 64;

/**
 * Finds the prompt marks (`ESC ] 133 ; A ... BEL` or `... ESC \`) in a byte stream that comes in
 * chunks, and gives each one's offset: where its `ESC` was. It follows xterm's parser closely
 * enough for these marks: CAN and SUB abort an OSC, and an `ESC` inside one ends it.
 */
export class PromptScanner {
  constructor() {
    /** @type {'ground' | 'escape' | 'osc' | 'osc-escape'} */
    this.state = 'ground';
    this.escapeAt = 0;
    this.oscStart = 0;
    this.body = '';
  }

  /**
   * The offsets of the prompt marks that end in `bytes`, whose first byte is at `start`.
   * @param {Uint8Array} bytes @param {number} start @returns {number[]}
   */
  scan(bytes, start) {
    const found = [];
    for (let index = 0; index < bytes.length; index += 1) {
      const offset = start + index;
      if (this.step(bytes[index], offset)) found.push(this.oscStart);
    }
    return found;
  }

  /** One byte; true when it ended a prompt mark. @param {number} byte @param {number} offset */
  step(byte, offset) {
    switch (this.state) {
      case 'ground':
        if (byte === 0x1b) this.enterEscape(offset);
        return false;
      case 'escape':
        if (byte === 0x5d) {
          this.state = 'osc';
          this.oscStart = this.escapeAt;
          this.body = '';
        } else if (byte === 0x1b) {
          this.enterEscape(offset);
        } else {
          this.state = 'ground';
        }
        return false;
      case 'osc':
        if (byte === 0x07) return this.endOsc();
        if (byte === 0x1b) this.state = 'osc-escape';
        else if (byte === 0x18 || byte === 0x1a) this.state = 'ground';
        else if (this.body.length < OSC_BODY_KEPT) this.body += String.fromCharCode(byte);
        return false;
      default:
        // `ESC \` ends the OSC; any other ESC ends it too and starts an escape sequence.
        if (byte === 0x5c) return this.endOsc();
        this.endOsc();
        this.enterEscape(offset - 1);
        return this.step(byte, offset);
    }
  }

  enterEscape(/** @type {number} */ offset) {
    this.state = 'escape';
    this.escapeAt = offset;
  }

  endOsc() {
    this.state = 'ground';
    return /^(133|633);A(;|$)/.test(this.body);
  }
}

/**
 * One tab's prompts and their commands. The tab tells it about each chunk it writes
 * (`written`/`parsed`), the page about each command the server reports (`command`).
 */
export class CommandMarks {
  /**
   * @param {{ terminal: Terminal, onMarkClicked: (prompt: Prompt, element: HTMLElement) => void }} parts
   */
  constructor({ terminal, onMarkClicked }) {
    this.terminal = terminal;
    this.onMarkClicked = onMarkClicked;
    this.scanner = new PromptScanner();
    /** The prompt offsets found in each chunk written and not parsed yet, oldest first. @type {number[][]} */
    this.chunks = [];
    /** The offset up to which xterm has parsed the output. */
    this.parsedOffset = 0;
    /** The prompts drawn, in the order of their offsets. @type {Prompt[]} */
    this.prompts = [];
    /** Commands the server reported whose output xterm has not parsed yet, by id. @type {Map<number, CommandRecord>} */
    this.waiting = new Map();
    /** The prompt a jump went to last, or null. @type {Prompt | null} */
    this.current = null;
    for (const number of PROMPT_OSC) {
      terminal.parser.registerOscHandler(number, (data) => {
        if (data === 'A' || data.startsWith('A;')) this.promptDrawn();
        return false;
      });
    }
  }

  /**
   * Output that goes to the terminal now, its first byte at `start`; `parsed(end)` must follow
   * when xterm has parsed it (the write's callback).
   * @param {Uint8Array} bytes @param {number} start
   */
  written(bytes, start) {
    this.chunks.push(this.scanner.scan(bytes, start));
  }

  /** A write that is not the session's output (a snapshot): its marks, if any, have no offsets. */
  writtenWithoutOffsets() {
    this.chunks.push([]);
  }

  /** xterm parsed the oldest chunk written; `end` is the offset after it (null: not output). */
  parsed(/** @type {number | null} */ end) {
    this.chunks.shift();
    if (end !== null) this.parsedOffset = Math.max(this.parsedOffset, end);
    for (const command of [...this.waiting.values()]) this.command(command);
  }

  /** xterm's parser reached a prompt mark: the cursor is on the prompt's line. */
  promptDrawn() {
    const offset = this.chunks[0]?.shift();
    if (offset === undefined) return;
    const marker = this.terminal.registerMarker(0);
    if (!marker) return;
    /** @type {Prompt} */
    const prompt = { offset, marker, command: null, decoration: null };
    marker.onDispose(() => this.forget(prompt));
    this.prompts.push(prompt);
  }

  /**
   * A snapshot drew the screen as of `offset`, its marks lost: the line the cursor is on stands
   * for the prompt the screen may show, at `offset` itself. Only a command that starts after the
   * snapshot and before any prompt drawn since can land on it, and a shell starts one only at a
   * prompt: the one on that line. A command that began before the snapshot has its first byte
   * at `offset` or before it, and every prompt drawn later has its own offset, at it or after.
   * Nothing stands for a full-screen program's screen: no command starts while it runs.
   */
  snapshotDrawn(/** @type {number} */ offset) {
    if (this.terminal.buffer.active.type !== 'normal') return;
    const marker = this.terminal.registerMarker(0);
    if (!marker) return;
    /** @type {Prompt} */
    const prompt = { offset, marker, command: null, decoration: null };
    marker.onDispose(() => this.forget(prompt));
    this.prompts.push(prompt);
  }

  /** A command as the server reports it (started or ended): its prompt gets or updates its mark. */
  command(/** @type {CommandRecord} */ command) {
    // The output before the command's first byte must be parsed, or its prompt may be missing.
    if (command.output_start > this.parsedOffset) {
      this.waiting.delete(command.id);
      this.waiting.set(command.id, command);
      if (this.waiting.size > WAITING_KEPT) this.waiting.delete(this.waiting.keys().next().value);
      return;
    }
    this.waiting.delete(command.id);
    const prompt = this.promptBefore(command.output_start);
    if (!prompt || (prompt.command && prompt.command.id !== command.id)) return;
    prompt.command = command;
    this.drawMark(prompt);
  }

  /** The last prompt drawn before `offset`. @param {number} offset */
  promptBefore(offset) {
    for (let index = this.prompts.length - 1; index >= 0; index -= 1) {
      if (this.prompts[index].offset < offset) return this.prompts[index];
    }
    return null;
  }

  /** The gutter mark of a prompt's command: running, or ended with success or failure. */
  drawMark(/** @type {Prompt} */ prompt) {
    if (!prompt.decoration) {
      prompt.decoration = this.terminal.registerDecoration({ marker: prompt.marker, x: 0, width: 1, layer: 'top' }) ?? null;
      prompt.decoration?.onRender((element) => this.renderMark(prompt, element));
    }
    // A decoration draws on the next render; one already drawn is brought up to date here.
    if (prompt.decoration?.element) this.renderMark(prompt, prompt.decoration.element);
  }

  /** @param {Prompt} prompt @param {HTMLElement} element */
  renderMark(prompt, element) {
    const command = prompt.command;
    if (!command) return;
    element.classList.add('command-mark');
    element.dataset.outcome = outcome(command);
    element.classList.toggle('current', prompt === this.current);
    element.title = describeCommand(command);
    element.setAttribute('role', 'button');
    element.setAttribute('aria-label', `Command: ${describeCommand(command)}`);
    if (!element.dataset.listening) {
      element.dataset.listening = 'true';
      element.addEventListener('mousedown', (event) => event.preventDefault());
      element.addEventListener('click', (event) => {
        event.stopPropagation();
        this.onMarkClicked(prompt, element);
      });
    }
  }

  /** A prompt's line went (the scrollback dropped it, a reset cleared it). */
  forget(/** @type {Prompt} */ prompt) {
    const index = this.prompts.indexOf(prompt);
    if (index >= 0) this.prompts.splice(index, 1);
    prompt.decoration?.dispose();
    if (this.current === prompt) this.current = null;
  }

  /** The prompts with a command, top to bottom. */
  get marked() {
    return this.prompts.filter((prompt) => prompt.command && !prompt.marker.isDisposed);
  }

  /**
   * Scrolls to the previous (-1) or next (1) command from the one jumped to last, or from the
   * viewport when none; past the last one, back to the bottom.
   * @param {-1 | 1} direction
   */
  jump(direction) {
    const marked = this.marked;
    const buffer = this.terminal.buffer.active;
    const anchor = this.current && !this.current.marker.isDisposed
      ? this.current.marker.line
      : direction < 0 ? buffer.viewportY + this.terminal.rows : buffer.viewportY - 1;
    const target = direction < 0
      ? marked.filter((prompt) => prompt.marker.line < anchor).at(-1)
      : marked.find((prompt) => prompt.marker.line > anchor);
    const before = this.current;
    this.current = target ?? null;
    for (const prompt of [before, this.current]) {
      if (prompt?.decoration?.element) this.renderMark(prompt, prompt.decoration.element);
    }
    if (target) this.terminal.scrollToLine(target.marker.line);
    else if (direction > 0) this.terminal.scrollToBottom();
  }

  /** Everything about the marks a test or tool may read (the pane's `commandMarks`). */
  describe() {
    return {
      marks: this.marked.map((prompt) => ({
        line: prompt.marker.line,
        id: prompt.command?.id ?? null,
        command: prompt.command?.command ?? null,
        exitCode: prompt.command?.exit_code ?? null,
        outcome: prompt.command ? outcome(prompt.command) : null,
      })),
      current: this.current?.command?.id ?? null,
    };
  }

  /** A reset or snapshot cleared the terminal: no prompt of it is left, nor anything in flight. */
  clear() {
    for (const prompt of [...this.prompts]) this.forget(prompt);
    this.current = null;
  }
}

/** `running`, `succeeded`, `failed`, or `ended` (a command the shell gave no exit code). */
function outcome(/** @type {CommandRecord} */ command) {
  if (command.ended_at === null) return 'running';
  if (command.exit_code === null) return 'ended';
  return command.exit_code === 0 ? 'succeeded' : 'failed';
}

/** The command line, its exit code and how long it took, as the tooltip says it. */
export function describeCommand(/** @type {CommandRecord} */ command) {
  const parts = [command.command];
  if (command.ended_at === null) parts.push('running');
  else if (command.exit_code !== null) parts.push(`exit ${command.exit_code}`);
  if (command.duration_ms !== null) parts.push(formatDuration(command.duration_ms));
  return parts.join(' · ');
}

/** 850 ms, 1.2 s, 3 min 4 s. */
export function formatDuration(/** @type {number} */ ms) {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  const seconds = Math.round(ms / 1000);
  return `${Math.floor(seconds / 60)} min ${seconds % 60} s`;
}

/**
 * The menu a mark opens: copy the command, copy its output, run it again. One for the page,
 * placed by the mark it was opened on.
 */
export class CommandMenu {
  /**
   * @param {{ copyCommand: (command: CommandRecord) => void, copyOutput: (command: CommandRecord) => void, runAgain: (command: CommandRecord) => void }} actions
   */
  constructor(actions) {
    this.actions = actions;
    /** @type {CommandRecord | null} */
    this.command = null;
    const item = (label, run) => el('button', {
      type: 'button', role: 'menuitem', onclick: () => {
        const command = this.command;
        this.close();
        if (command) run(command);
      },
    }, label);
    this.title = el('div', { class: 'command-menu-title' });
    this.element = el('div', { class: 'command-menu', role: 'menu', 'aria-label': 'Command', hidden: true },
      this.title,
      item('Copy command', (command) => actions.copyCommand(command)),
      item('Copy output', (command) => actions.copyOutput(command)),
      item('Run again', (command) => actions.runAgain(command)));
    this.element.addEventListener('keydown', (event) => {
      event.stopPropagation();
      if (event.key === 'Escape') this.close();
    });
    document.addEventListener('pointerdown', (event) => {
      if (!this.element.hidden && !(event.target instanceof Node && this.element.contains(event.target))) this.close();
    }, true);
  }

  /** Opens the menu beside `anchor` for `command`. */
  open(/** @type {CommandRecord} */ command, /** @type {HTMLElement} */ anchor) {
    this.command = command;
    this.title.textContent = describeCommand(command);
    const box = anchor.getBoundingClientRect();
    this.element.style.left = `${Math.round(box.right + 4)}px`;
    this.element.style.top = `${Math.round(box.top)}px`;
    this.element.hidden = false;
    // Kept inside the window: a mark near its bottom or right edge opens it upwards or leftwards.
    const menu = this.element.getBoundingClientRect();
    if (menu.bottom > window.innerHeight) this.element.style.top = `${Math.max(0, Math.round(window.innerHeight - menu.height - 4))}px`;
    if (menu.right > window.innerWidth) this.element.style.left = `${Math.max(0, Math.round(window.innerWidth - menu.width - 4))}px`;
    /** @type {HTMLElement | null} */ (this.element.querySelector('[role="menuitem"]'))?.focus();
  }

  close() {
    this.element.hidden = true;
    this.command = null;
  }
}
