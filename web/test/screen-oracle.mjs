// The screen oracle: what xterm.js, configured as the page configures it (Unicode 11 widths),
// shows for a byte stream. The broker's emulator is held to it
// (services/pty-broker/tests/broker/screen_oracle.rs); users see xterm.js, so where the two
// disagree, xterm is right.
//
//   node test/screen-oracle.mjs --cols C --rows R [--at OFFSET]... FILE
//
// Writes FILE's bytes to a fresh headless xterm of C columns and R rows and prints, as one JSON
// object, the screen after the bytes up to each OFFSET and after all of them:
// `{"states": [{"offset", "rows": [{"wrapped", "cells": [{"text", "width", "fg", "bg", "bold",
// ...}]}], "cursor": {"row", "col", "visible"}, "title", "modes": {...}}]}`. A colour is null
// (the default), `{"indexed": N}` or `{"rgb": [R, G, B]}`. Bad arguments exit 2 with a message.
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import xtermHeadless from '@xterm/headless';
import unicode11 from '@xterm/addon-unicode11';

const { Terminal } = xtermHeadless;
const { Unicode11Addon } = unicode11;

const MAX_COLS = 1000;
const MAX_ROWS = 500;

/**
 * The command line, checked: every number a whole number in range, one file.
 * @param {string[]} argv
 */
function parseCommandLine(argv) {
  const { values, positionals } = parseArgs({
    args: argv,
    options: {
      cols: { type: 'string' },
      rows: { type: 'string' },
      at: { type: 'string', multiple: true, default: [] },
    },
    allowPositionals: true,
  });
  if (positionals.length !== 1) {
    throw new Error(`expected one fixture file, got ${positionals.length}`);
  }
  const cols = wholeNumber('--cols', values.cols, 1, MAX_COLS);
  const rows = wholeNumber('--rows', values.rows, 1, MAX_ROWS);
  const at = values.at.map((offset) => wholeNumber('--at', offset, 0, Number.MAX_SAFE_INTEGER));
  return { cols, rows, at, file: positionals[0] };
}

/**
 * @param {string} name
 * @param {string | undefined} text
 * @param {number} min
 * @param {number} max
 */
function wholeNumber(name, text, min, max) {
  if (text === undefined) {
    throw new Error(`${name} is required`);
  }
  const value = Number(text);
  if (!/^\d+$/.test(text) || value < min || value > max) {
    throw new Error(`${name} must be a whole number from ${min} to ${max}, not ${JSON.stringify(text)}`);
  }
  return value;
}

/**
 * A headless xterm set up as the page's (web/src/session-tab.js): Unicode 11 widths, and the
 * proposed API the Unicode switch needs.
 * @param {number} cols
 * @param {number} rows
 */
function pageTerminal(cols, rows) {
  const terminal = new Terminal({ cols, rows, scrollback: 0, allowProposedApi: true });
  terminal.loadAddon(new Unicode11Addon());
  terminal.unicode.activeVersion = '11';
  return terminal;
}

/**
 * Writes `data` and resolves once xterm has parsed it.
 * @param {Terminal} terminal
 * @param {Uint8Array} data
 */
function write(terminal, data) {
  return new Promise((resolve) => terminal.write(data, () => resolve(undefined)));
}

/**
 * A cell's colour: null for the default, a palette index, or red, green and blue.
 * @param {boolean} isDefault
 * @param {boolean} isRgb
 * @param {number} value
 */
function colour(isDefault, isRgb, value) {
  if (isDefault) {
    return null;
  }
  if (isRgb) {
    return { rgb: [(value >> 16) & 0xff, (value >> 8) & 0xff, value & 0xff] };
  }
  return { indexed: value };
}

/**
 * The visible rows of the active buffer, cell by cell.
 * @param {Terminal} terminal
 */
function visibleRows(terminal) {
  const buffer = terminal.buffer.active;
  const rows = [];
  const cell = buffer.getNullCell();
  for (let y = 0; y < terminal.rows; y++) {
    const line = buffer.getLine(buffer.viewportY + y);
    const cells = [];
    for (let x = 0; x < terminal.cols; x++) {
      line.getCell(x, cell);
      cells.push({
        text: cell.getChars(),
        width: cell.getWidth(),
        fg: colour(cell.isFgDefault(), cell.isFgRGB(), cell.getFgColor()),
        bg: colour(cell.isBgDefault(), cell.isBgRGB(), cell.getBgColor()),
        bold: Boolean(cell.isBold()),
        dim: Boolean(cell.isDim()),
        italic: Boolean(cell.isItalic()),
        underline: Boolean(cell.isUnderline()),
        inverse: Boolean(cell.isInverse()),
        blink: Boolean(cell.isBlink()),
        invisible: Boolean(cell.isInvisible()),
        strikethrough: Boolean(cell.isStrikethrough()),
      });
    }
    rows.push({ wrapped: line.isWrapped, cells });
  }
  return rows;
}

/**
 * What xterm shows and the modes a program set. The cursor's visibility and the mouse
 * encoding have no public API: they are read from xterm's core services, which the page's
 * xterm version pins.
 * @param {Terminal} terminal
 * @param {number} offset
 * @param {string} title
 */
function state(terminal, offset, title) {
  const buffer = terminal.buffer.active;
  // @ts-ignore: xterm's internals, see above.
  const core = terminal._core;
  return {
    offset,
    rows: visibleRows(terminal),
    cursor: {
      row: buffer.cursorY,
      col: buffer.cursorX,
      visible: !core.coreService.isCursorHidden,
    },
    title,
    modes: {
      alternate_screen: buffer.type === 'alternate',
      application_cursor: terminal.modes.applicationCursorKeysMode,
      application_keypad: terminal.modes.applicationKeypadMode,
      bracketed_paste: terminal.modes.bracketedPasteMode,
      mouse_tracking: terminal.modes.mouseTrackingMode,
      mouse_encoding: core.coreMouseService.activeEncoding,
      auto_wrap: terminal.modes.wraparoundMode,
      origin: terminal.modes.originMode,
      insert: terminal.modes.insertMode,
    },
  };
}

async function main() {
  let options;
  try {
    options = parseCommandLine(process.argv.slice(2));
  } catch (error) {
    process.stderr.write(`screen-oracle: ${error.message}\n`);
    process.exit(2);
  }
  let data;
  try {
    data = readFileSync(options.file);
  } catch (error) {
    process.stderr.write(`screen-oracle: cannot read ${options.file}: ${error.message}\n`);
    process.exit(2);
  }
  const offsets = [...new Set([...options.at, data.length])].sort((a, b) => a - b);
  const beyond = offsets.find((offset) => offset > data.length);
  if (beyond !== undefined) {
    process.stderr.write(`screen-oracle: --at ${beyond} is beyond the file's ${data.length} bytes\n`);
    process.exit(2);
  }
  const terminal = pageTerminal(options.cols, options.rows);
  let title = '';
  terminal.onTitleChange((changed) => {
    title = changed;
  });
  const states = [];
  let written = 0;
  for (const offset of offsets) {
    await write(terminal, data.subarray(written, offset));
    written = offset;
    states.push(state(terminal, offset, title));
  }
  process.stdout.write(`${JSON.stringify({ states })}\n`);
  terminal.dispose();
}

await main();
