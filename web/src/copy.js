// The copy view (the phone's Select key): the shown tab's terminal text in a dialog of its own,
// where the browser's own selection works, and copying the selection, or all of it when nothing
// is selected, to the clipboard.

import { writeToClipboard } from './clipboard.js';
import { el } from './dom.js';

/** @typedef {import('./session-tab.js').SessionTab} SessionTab */

export class CopyView {
  /**
   * @param {{ activeTab: () => SessionTab | null, showToast: (text: string, kind?: string) => void }} parts
   */
  constructor({ activeTab, showToast }) {
    this.activeTab = activeTab;
    this.showToast = showToast;
    this.text = el('pre', { class: 'copy-text', tabindex: '0' });
    this.element = el('div', { class: 'copy-view', role: 'dialog', 'aria-label': 'Select text', hidden: true },
      el('div', { class: 'copy-toolbar' },
        el('span', {}, 'Select text, then copy'),
        el('button', { type: 'button', onclick: () => this.copySelection() }, 'Copy'),
        el('button', { type: 'button', onclick: () => this.close() }, 'Done')),
      this.text);
  }

  /** Shows the shown tab's text, scrolled to its end as the terminal is. */
  open() {
    const tab = this.activeTab();
    if (!tab) return;
    this.text.textContent = tab.bufferText();
    this.element.hidden = false;
    this.text.scrollTop = this.text.scrollHeight;
  }

  close() {
    this.element.hidden = true;
    this.activeTab()?.terminal.focus();
  }

  async copySelection() {
    const selection = window.getSelection();
    const selected = selection && !selection.isCollapsed && this.text.contains(selection.anchorNode)
      ? selection.toString()
      : this.text.textContent;
    await writeToClipboard(selected);
    this.showToast(`Copied ${selected.length} characters`, 'info');
  }
}
