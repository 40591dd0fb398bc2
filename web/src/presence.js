// Who is in the shown session, in the header (CONTRACT.md "Presence", "Control requests"): each
// attached stream as initials with a tooltip (who, in which role, through what), "<name> is
// typing", a "Request control" button for a viewer whose credential may control, and, for the
// controller, a viewer's request with Grant and Decline. The shown tab (session-tab.js) owns the
// facts (the record's `presence`, its role, a pending request); this only draws them and hands
// the buttons back to it.

import { el } from './dom.js';

/** A principal's initials: the first letters of up to two words of its name ("alice" → "A"). */
export function initials(principal) {
  const words = String(principal || '?').replace(/^share:/, '').split(/[\s._@-]+/).filter(Boolean);
  return (words.length ? words.slice(0, 2).map((word) => word[0]) : ['?']).join('').toUpperCase();
}

/** How a tooltip and a screen reader name an attendee. */
export function attendeeWords(attendee) {
  const who = attendee.principal || 'someone';
  return `${who} (${attendee.role}, ${attendee.surface || 'unknown surface'})`;
}

export class PresenceBar {
  constructor() {
    this.people = el('ul', { class: 'presence', 'aria-label': 'Who is here', 'data-testid': 'presence' });
    this.typing = el('span', { class: 'presence-typing', role: 'status', 'aria-live': 'polite', 'data-testid': 'typing' });
    this.requestButton = el('button', {
      type: 'button', class: 'text-button', hidden: true, 'data-testid': 'request-control',
      onclick: () => this.tab?.requestControl(),
    }, 'Request control');
    this.requestWords = el('span', { class: 'control-request-words' });
    this.requestPrompt = el('div', { class: 'control-request', role: 'alert', hidden: true, 'data-testid': 'control-request' },
      this.requestWords,
      el('button', { type: 'button', class: 'text-button', onclick: () => this.tab?.answerControl(true) }, 'Grant'),
      el('button', { type: 'button', class: 'text-button', onclick: () => this.tab?.answerControl(false) }, 'Decline'));
    this.element = el('span', { class: 'presence-bar' }, this.people, this.typing, this.requestButton, this.requestPrompt);
    /** @type {import('./session-tab.js').SessionTab | null} */
    this.tab = null;
  }

  /** Draws `tab`'s presence, or nothing when no tab is shown. */
  show(tab) {
    this.tab = tab;
    const presence = tab?.presence ?? [];
    this.people.replaceChildren(...presence.map((attendee) => el('li', {
      class: 'presence-person',
      'data-role': attendee.role,
      'data-typing': String(Boolean(attendee.typing)),
      title: attendeeWords(attendee),
      'aria-label': attendeeWords(attendee),
    }, initials(attendee.principal))));
    const typists = [...new Set(presence.filter((attendee) => attendee.typing).map((attendee) => attendee.principal || 'someone'))];
    const typing = typists.length === 0 ? '' : `${typists.join(', ')} ${typists.length === 1 ? 'is' : 'are'} typing`;
    if (this.typing.textContent !== typing) this.typing.textContent = typing;
    this.requestButton.hidden = !tab?.mayRequestControl;
    this.requestButton.disabled = Boolean(tab?.controlRequested);
    const request = tab?.controlRequest ?? null;
    this.requestPrompt.hidden = request === null;
    this.requestWords.textContent = request
      ? `${request.requester?.principal || 'Someone'} asks for control`
      : '';
  }
}
