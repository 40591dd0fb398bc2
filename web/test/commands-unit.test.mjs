// The prompt scanner of the commands' marks (src/commands.js) under node, without a browser: it
// must find each OSC 133/633 `A` at the offset of its ESC, across chunk boundaries and with
// either terminator, and nothing else; and the tooltip's words for a command.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { describeCommand, formatDuration, PromptScanner } from '../src/commands.js';

const bytes = (text) => Uint8Array.from(text, (character) => character.charCodeAt(0));

/** Scans `chunks` in order, as the output comes, returning every offset found. */
function scanAll(chunks) {
  const scanner = new PromptScanner();
  let offset = 100;
  const found = [];
  for (const chunk of chunks) {
    found.push(...scanner.scan(bytes(chunk), offset));
    offset += chunk.length;
  }
  return found;
}

describe('PromptScanner', () => {
  test('finds a prompt mark with BEL or ST at the offset of its ESC', () => {
    assert.deepEqual(scanAll(['ab\x1b]133;A\x07$ ']), [102]);
    assert.deepEqual(scanAll(['\x1b]633;A\x1b\\$ ']), [100]);
    assert.deepEqual(scanAll(['x\x1b]133;A;cl=m\x07']), [101]);
  });

  test('finds a mark split across chunks, counted where it began', () => {
    assert.deepEqual(scanAll(['out\x1b', ']13', '3;A', '\x07$ ']), [103]);
    assert.deepEqual(scanAll(['\x1b]133;A\x1b', '\\']), [100]);
  });

  test('finds the prompt among the other marks of a prompt line', () => {
    const line = '\x1b]133;D;1\x07\x1b]7;file://host/tmp\x07\x1b]133;A\x07$ \x1b]133;B\x07';
    assert.deepEqual(scanAll([line]), [line.indexOf('\x1b]133;A') + 100]);
  });

  test('ignores other OSCs, an aborted one, and an A that is not the first letter', () => {
    assert.deepEqual(scanAll(['\x1b]133;B\x07\x1b]1133;A\x07\x1b]133;AB\x07']), []);
    assert.deepEqual(scanAll(['\x1b]133;\x18A\x07']), []);
    assert.deepEqual(scanAll(['\x1b]2;133;A\x07']), []);
  });

  test('an ESC inside an OSC ends it and starts the next sequence', () => {
    assert.deepEqual(scanAll(['\x1b]0;title\x1b\x1b]133;A\x07']), [110]);
  });
});

describe('the tooltip of a mark', () => {
  const command = {
    id: 3, command: 'false', cwd: null, started_at: '', ended_at: 'then', exit_code: 1,
    duration_ms: 3, output_start: 10, output_end: 12,
  };

  test('says the command line, its exit code and its duration', () => {
    assert.equal(describeCommand(command), 'false · exit 1 · 3 ms');
    assert.equal(describeCommand({ ...command, ended_at: null, exit_code: null, duration_ms: null }), 'false · running');
  });

  test('durations read as a person says them', () => {
    assert.equal(formatDuration(850), '850 ms');
    assert.equal(formatDuration(1234), '1.2 s');
    assert.equal(formatDuration(184_000), '3 min 4 s');
  });
});
