// The instances page (`/`): every instance the credential may use, with its live session count.

import { api, ApiError } from './api.js';
import { signOutButton } from './auth.js';
import { el, loadingView } from './dom.js';

const REFRESH_MS = 10_000;

export async function showInstancesPage(app, { onUnauthorized, onRefused }) {
  app.replaceChildren(loadingView('Loading the instances…'));
  document.title = 'Loading · ptyhub';
  let instances;
  try {
    instances = await api.listInstances();
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) return onUnauthorized();
    return onRefused(error);
  }
  const list = el('ul', { class: 'instance-list', 'aria-label': 'Instances' });
  const render = (items) => {
    list.replaceChildren(...items.map((instance) => {
      const live = Number(instance.live_sessions) || 0;
      const max = Number(instance.max_sessions) || 0;
      return el('li', { class: 'instance', 'data-instance-id': instance.id },
        el('a', { href: `/instances/${encodeURIComponent(instance.id)}` },
          el('span', { class: 'instance-title' }, instance.name),
          el('span', { class: 'instance-meta' }, describeTarget(instance)),
          el('span', { class: 'session-count', 'aria-label': `${live} live sessions` },
            `${live} live session${live === 1 ? '' : 's'}`, max ? el('span', { class: 'of-max' }, ` of ${max}`) : null)));
    }));
    if (items.length === 0) list.append(el('li', { class: 'empty' }, 'No instances yet: register one with `ptyhub instance add` or the REST API.'));
  };
  render(instances);
  app.replaceChildren(el('div', { class: 'instances-page' },
    el('header', { class: 'topbar' }, el('span', { class: 'brand' }, 'ptyhub'), el('span', { class: 'spacer' }), signOutButton()),
    el('main', { class: 'instances-main' }, el('h1', {}, 'Instances'), list)));
  document.title = 'Instances · ptyhub';
  // Keep the counts live while the page is visible.
  const timer = setInterval(async () => {
    if (document.visibilityState !== 'visible') return;
    try {
      render(await api.listInstances());
    } catch (error) {
      if (error instanceof ApiError && error.status === 401) {
        clearInterval(timer);
        onUnauthorized();
      }
    }
  }, REFRESH_MS);
}

function describeTarget(instance) {
  const target = instance.target;
  if (target?.docker?.container) return `container ${target.docker.container}`;
  if (target?.local) return 'local';
  return instance.id;
}
