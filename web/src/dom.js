// A small element builder: el('button', { class: 'x', onclick: fn, 'aria-label': 'y' }, 'text'),
// the icons and icon buttons, and the view shown while a page loads.

/**
 * @param {string} tag
 * @param {Record<string, any>} [attributes]
 * @param {...any} children
 * @returns {any}
 */
export function el(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('on') && typeof value === 'function') {
      element.addEventListener(name.slice(2), value);
    } else if (name === 'hidden' || name === 'disabled') {
      element[name] = Boolean(value);
    } else {
      element.setAttribute(name, value === true ? '' : String(value));
    }
  }
  element.append(...children.flat().filter((child) => child !== null && child !== undefined && child !== false));
  return element;
}

/** @type {Record<string, string>} */
const ICONS = {
  fullscreen: 'M3 7V3h4M13 3h4v4M17 13v4h-4M7 17H3v-4',
  search: 'M8.5 14a5.5 5.5 0 1 0 0-11 5.5 5.5 0 0 0 0 11zM12.5 12.5L17 17',
  theme: 'M10 17a7 7 0 1 0 0-14v14zM10 3a7 7 0 1 1 0 14',
  eye: 'M1.5 10s3-6 8.5-6 8.5 6 8.5 6-3 6-8.5 6S1.5 10 1.5 10zM10 12.5a2.5 2.5 0 1 0 0-5 2.5 2.5 0 0 0 0 5z',
  keyboard: 'M2 5h16v10H2zM5 8h1M8 8h1M11 8h1M14 8h1M6 12h8',
  clipboard: 'M7 3h6v2.5H7zM7 4H4.5v13h11V4H13M7.5 10h5M7.5 13h5',
  bell: 'M5 14.5V9a5 5 0 0 1 10 0v5.5l1.5 1.5h-13zM8.5 18h3',
  link: 'M8.5 11.5a3.5 3.5 0 0 0 5 0l3-3a3.5 3.5 0 0 0-5-5l-1 1M11.5 8.5a3.5 3.5 0 0 0-5 0l-3 3a3.5 3.5 0 0 0 5 5l1-1',
};

/** A small stroked SVG icon (the system fonts lack most symbol glyphs). */
export function icon(/** @type {string} */ name) {
  const namespace = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(namespace, 'svg');
  svg.setAttribute('viewBox', '0 0 20 20');
  svg.setAttribute('width', '14');
  svg.setAttribute('height', '14');
  svg.setAttribute('aria-hidden', 'true');
  const path = document.createElementNS(namespace, 'path');
  path.setAttribute('d', ICONS[name]);
  path.setAttribute('fill', 'none');
  path.setAttribute('stroke', 'currentColor');
  path.setAttribute('stroke-width', '1.8');
  path.setAttribute('stroke-linecap', 'round');
  path.setAttribute('stroke-linejoin', 'round');
  svg.append(path);
  return svg;
}

/**
 * A button drawn as an icon or a glyph: `label` names it for screen readers and is its tooltip.
 * @param {string} label
 * @param {any} content
 * @param {(event: MouseEvent) => void} onClick
 * @param {Record<string, any>} [extra] more attributes
 * @returns {any}
 */
export function iconButton(label, content, onClick, extra = {}) {
  return el('button', { type: 'button', class: 'icon-button', 'aria-label': label, title: label, onclick: onClick, ...extra }, content);
}

/** What a page shows while it loads: a spinner and words, announced as a busy status. */
export function loadingView(/** @type {string} */ text) {
  return el('main', { class: 'loading', role: 'status', 'aria-busy': 'true', 'aria-live': 'polite' },
    el('span', { class: 'spinner', 'aria-hidden': 'true' }),
    el('span', { class: 'loading-text' }, text));
}
