// The gateway's REST API (CONTRACT.md "REST (gateway)"), with the bearer token on every call.

import { currentToken } from './auth.js';

/** A refused or failed call: `status` is the HTTP status (0 when the gateway did not answer). */
export class ApiError extends Error {
  constructor(status, detail) {
    super(detail);
    this.name = 'ApiError';
    this.status = status;
    this.detail = detail;
  }
}

async function call(method, path, body) {
  const headers = { Accept: 'application/json' };
  const token = currentToken();
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let response;
  try {
    response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: 'no-store',
    });
  } catch (error) {
    throw new ApiError(0, `the gateway cannot be reached (${error.message})`);
  }
  const text = await response.text();
  let json = null;
  try {
    json = text === '' ? null : JSON.parse(text);
  } catch {
    json = null;
  }
  if (!response.ok) {
    const detail = json && typeof json.detail === 'string' ? json.detail : `${response.status} ${response.statusText}`.trim();
    throw new ApiError(response.status, detail);
  }
  return json;
}

const instancePath = (iid) => `/api/v1/instances/${encodeURIComponent(iid)}`;
const sessionsPath = (iid) => `${instancePath(iid)}/terminal/sessions`;
const sessionPath = (iid, sid) => `${sessionsPath(iid)}/${encodeURIComponent(sid)}`;

export const api = {
  listInstances: async () => (await call('GET', '/api/v1/instances')).instances ?? [],
  getInstance: (iid) => call('GET', instancePath(iid)),
  listSessions: async (iid) => (await call('GET', sessionsPath(iid))).sessions ?? [],
  createSession: (iid, { cols, rows } = {}) => call('POST', sessionsPath(iid), { cols, rows }),
  renameSession: (iid, sid, name) => call('POST', `${sessionPath(iid, sid)}/rename`, { name }),
  resetSession: (iid, sid) => call('POST', `${sessionPath(iid, sid)}/reset`),
  closeSession: (iid, sid) => call('DELETE', sessionPath(iid, sid)),
};
