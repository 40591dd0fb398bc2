// The find bar: the text searched for in the shown tab's terminal and scrollback (xterm's search
// addon, through SessionTab.find), next and previous match, the matches counted, and the tab
// strip's button that opens it.

import { el, icon, iconButton } from './dom.js';

/** @typedef {import('./session-tab.js').SessionTab} SessionTab */

export class SearchBar {
  /** @param {{ activeTab: () => SessionTab | null, tabs: () => SessionTab[] }} parts */
  constructor({ activeTab, tabs }) {
    this.activeTab = activeTab;
    this.tabs = tabs;
    this.button = iconButton('Find in the terminal', icon('search'), () => this.open());
    this.button.title = 'Find in the terminal (Ctrl+Shift+F)';
    this.input = el('input', { type: 'search', class: 'search-input', 'aria-label': 'Find in the terminal', placeholder: 'Find', autocomplete: 'off', spellcheck: 'false' });
    this.count = el('span', { class: 'search-count', 'aria-live': 'polite' });
    this.element = el('div', { class: 'search-bar', role: 'search', 'aria-label': 'Find in the terminal', hidden: true },
      this.input, this.count,
      iconButton('Previous match', '↑', () => this.find('previous')),
      iconButton('Next match', '↓', () => this.find('next')),
      iconButton('Close search', '×', () => this.close()));
    this.input.addEventListener('input', () => this.find('next', { incremental: true }));
    this.input.addEventListener('keydown', (event) => {
      event.stopPropagation();
      if (event.key === 'Enter') {
        event.preventDefault();
        this.find(event.shiftKey ? 'previous' : 'next');
      } else if (event.key === 'Escape') {
        event.preventDefault();
        this.close();
      }
    });
  }

  open() {
    if (!this.activeTab()) return;
    this.element.hidden = false;
    this.input.focus();
    this.input.select();
    if (this.input.value) this.find('next', { incremental: true });
  }

  close() {
    this.element.hidden = true;
    this.count.textContent = '';
    for (const tab of this.tabs()) tab.endSearch();
    this.activeTab()?.terminal.focus();
  }

  /**
   * Another tab is shown while the bar is open: `previous` loses its highlights, and the tab now
   * shown is searched for the same text.
   * @param {SessionTab} previous
   */
  switchedFrom(previous) {
    if (this.element.hidden) return;
    previous.endSearch();
    this.find('next', { incremental: true });
  }

  /** @param {'next' | 'previous'} direction @param {{ incremental?: boolean }} [options] */
  find(direction, options) {
    const tab = this.activeTab();
    if (!tab) return;
    const found = tab.find(this.input.value, direction, options);
    if (!found) this.count.textContent = this.input.value ? 'No matches' : '';
    this.element.dataset.found = String(found);
  }

  /**
   * What the shown tab's search addon found: which match is selected, of how many.
   * @param {{ resultIndex: number, resultCount: number }} results
   */
  showResults({ resultIndex, resultCount }) {
    if (this.element.hidden || !this.input.value) return;
    this.count.textContent = resultCount === 0
      ? 'No matches'
      : resultIndex < 0 ? `${resultCount} matches` : `${resultIndex + 1} of ${resultCount}`;
  }
}
