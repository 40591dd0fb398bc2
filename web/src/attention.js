// A background tab's attention mark: what it is shown for, what it keeps under a mark that
// outranks it, and when it goes. The page (src/terminal-page.js) calls these as bells, waits for
// input, exits and looks at the tab come; kept apart so that the rules are tested without a
// browser (test/attention-unit.test.mjs).

/** Which mark a tab keeps when another comes: an exit is the last word, input asks more than a bell. */
export const ATTENTION_RANK = Object.freeze({ bell: 1, input: 2, exited: 3 });

/**
 * The part of a tab these rules read and write (a `SessionTab`'s fields of the same names).
 * @typedef {{ attention: 'bell' | 'input' | 'exited' | null, bellUnseen: boolean }} Marked
 */

/**
 * A bell, a wait for input or an exit in a tab that is not shown. A bell is kept as unseen
 * even under a mark that outranks it, for when that mark goes. Returns whether the tab shows
 * `kind` now (false: a mark that outranks it stays).
 * @param {Marked} tab @param {'bell' | 'input' | 'exited'} kind
 */
export function attentionCame(tab, kind) {
  if (kind === 'bell') tab.bellUnseen = true;
  if (tab.attention && ATTENTION_RANK[tab.attention] > ATTENTION_RANK[kind]) return false;
  tab.attention = kind;
  return true;
}

/**
 * The tab was shown: every mark, and the bell under it, was seen. Returns whether a mark went.
 * @param {Marked} tab
 */
export function attentionSeen(tab) {
  tab.bellUnseen = false;
  const had = tab.attention !== null;
  tab.attention = null;
  return had;
}

/**
 * The tab's session stopped waiting for input: the wait's mark goes, and a bell that rang
 * unseen (a program that rings while it runs is waiting for input) shows again. Returns whether
 * the shown mark changed.
 * @param {Marked} tab
 */
export function waitEnded(tab) {
  if (tab.attention !== 'input') return false;
  tab.attention = tab.bellUnseen ? 'bell' : null;
  return true;
}
