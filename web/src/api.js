// The gateway's REST API (CONTRACT.md "REST (gateway)"), the session-change events of an
// instance, and the terminal WebSocket's address. The credential is the session cookie, which
// the browser sends itself: no token is in any header, URL or storage of the page.

/**
 * One stream attached to a session (CONTRACT.md "Presence").
 * @typedef {{ principal: string, role: string, surface: string, since: string, typing: boolean }} Attendee
 */
/**
 * A session as REST and the change stream give it; `state`, `progress` and `last_notification`
 * say what its terminal is doing (CONTRACT.md "Commands and terminal state").
 * @typedef {{ id: string, name: string, status: string, aliases?: string[], title?: string, last_bell_at?: string | null, exit_code?: number | null, exit_signal?: number | null, state?: string, progress?: { kind: string, percent: number | null } | null, last_notification?: { text: string, at: string } | null, presence?: Attendee[] }} SessionRecord
 */
/**
 * A command of a session's shell (CONTRACT.md "Commands"): `output_start` .. `output_end` are
 * offsets in the session's output.
 * @typedef {{ id: number, command: string, cwd: string | null, started_at: string, ended_at: string | null, exit_code: number | null, duration_ms: number | null, output_start: number, output_end: number | null }} CommandRecord
 */

/** A refused or failed call: `status` is the HTTP status (0 when the gateway did not answer). */
export class ApiError extends Error {
  /** @param {number} status @param {string} detail */
  constructor(status, detail) {
    super(detail);
    this.name = 'ApiError';
    this.status = status;
    this.detail = detail;
  }
}

/**
 * @param {string} method
 * @param {string} path
 * @param {unknown} [body]
 * @returns {Promise<any>}
 */
async function call(method, path, body) {
  /** @type {Record<string, string>} */
  const headers = { Accept: 'application/json' };
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
    throw new ApiError(0, `the gateway cannot be reached (${error instanceof Error ? error.message : error})`);
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

/** @param {string} iid */
const instancePath = (iid) => `/api/v1/instances/${encodeURIComponent(iid)}`;
/** @param {string} iid */
const sessionsPath = (iid) => `${instancePath(iid)}/terminal/sessions`;
/** @param {string} iid @param {string} sid */
const sessionPath = (iid, sid) => `${sessionsPath(iid)}/${encodeURIComponent(sid)}`;

export const api = {
  /** @returns {Promise<any[]>} */
  listInstances: async () => (await call('GET', '/api/v1/instances')).instances ?? [],
  /** @param {string} iid */
  getInstance: (iid) => call('GET', instancePath(iid)),
  /** @param {string} iid @param {{ includeClosed?: boolean }} [options] @returns {Promise<SessionRecord[]>} */
  listSessions: async (iid, { includeClosed = false } = {}) =>
    (await call('GET', `${sessionsPath(iid)}${includeClosed ? '?include=closed' : ''}`)).sessions ?? [],
  /** A closed session's asciicast v2 recording, as text. @param {string} iid @param {string} sid @returns {Promise<string>} */
  getRecording,
  /** @param {string} iid @param {{ cols?: number, rows?: number }} [size] @returns {Promise<SessionRecord>} */
  createSession: (iid, { cols, rows } = {}) => call('POST', sessionsPath(iid), { cols, rows }),
  /** @param {string} iid @param {string} sid @param {string} name */
  renameSession: (iid, sid, name) => call('POST', `${sessionPath(iid, sid)}/rename`, { name }),
  /** @param {string} iid @param {string} sid */
  resetSession: (iid, sid) => call('POST', `${sessionPath(iid, sid)}/reset`),
  /** @param {string} iid @param {string} sid */
  closeSession: (iid, sid) => call('DELETE', sessionPath(iid, sid)),
  /**
   * A viewer-only share link of one session (or, without `sid`, of the whole instance).
   * @param {string} iid @param {string | null} sid
   * @returns {Promise<{ id: string, url: string, expires_at: string }>}
   */
  createShare: (iid, sid) => call('POST', `${instancePath(iid)}/shares`, sid ? { session_id: sid } : {}),
  /**
   * The commands a session keeps with an id above `after`, oldest first.
   * @param {string} iid @param {string} sid @param {number} [after] @returns {Promise<CommandRecord[]>}
   */
  listCommands: async (iid, sid, after = 0) =>
    (await call('GET', `${sessionPath(iid, sid)}/commands?after=${after}&limit=1000`)).commands ?? [],
  /** A command's output as plain text. @param {string} iid @param {string} sid @param {number} cid @returns {Promise<string>} */
  commandOutput: (iid, sid, cid) => fetchText(`${sessionPath(iid, sid)}/commands/${cid}/output?format=text`),
  watchSessions,
  terminalSocketUrl,
};

/**
 * @param {string} iid
 * @param {string} sid
 */
function getRecording(iid, sid) {
  return fetchText(`${sessionPath(iid, sid)}/recording`);
}

/**
 * A GET whose answer is text (a recording, a command's output); an ApiError with the `detail`
 * when it is refused.
 * @param {string} path
 * @returns {Promise<string>}
 */
async function fetchText(path) {
  let response;
  try {
    response = await fetch(path, { cache: 'no-store' });
  } catch (error) {
    throw new ApiError(0, `the gateway cannot be reached (${error instanceof Error ? error.message : error})`);
  }
  const text = await response.text();
  if (!response.ok) {
    let detail = `${response.status} ${response.statusText}`.trim();
    try {
      const json = JSON.parse(text);
      if (typeof json?.detail === 'string') detail = json.detail;
    } catch {
      // Not JSON: the status says enough.
    }
    throw new ApiError(response.status, detail);
  }
  return text;
}

/**
 * Follows the instance's session changes (`GET .../terminal/events`, Server-Sent Events read
 * through fetch): `onEvent(name, data)` gets the opening
 * `sessions` event (`{sessions: [...]}`) and then one event per change (`created`, `renamed`,
 * `status`, `closed`, `attachments`, `screen`, with the session after the change). Resolves
 * when the stream ends, rejects with an ApiError when it cannot be opened or breaks.
 *
 * @param {string} iid
 * @param {(name: string, data: any) => void} onEvent
 * @param {AbortSignal} signal
 */
async function watchSessions(iid, onEvent, signal) {
  let response;
  try {
    response = await fetch(`${instancePath(iid)}/terminal/events`, {
      headers: { Accept: 'text/event-stream' },
      cache: 'no-store',
      signal,
    });
  } catch (error) {
    throw new ApiError(0, `the gateway cannot be reached (${error instanceof Error ? error.message : error})`);
  }
  if (!response.ok || !response.body) {
    let detail = `${response.status} ${response.statusText}`.trim();
    try {
      const json = await response.json();
      if (typeof json?.detail === 'string') detail = json.detail;
    } catch {
      // Not JSON: the status says enough.
    }
    throw new ApiError(response.status, detail);
  }
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value.replace(/\r\n?/g, '\n');
      let end;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const event = parseEvent(block);
        if (event) onEvent(event.name, event.data);
      }
    }
  } catch (error) {
    if (signal.aborted) return;
    throw new ApiError(0, `the session events broke off (${error instanceof Error ? error.message : error})`);
  }
}

/**
 * One Server-Sent Event block (`event:` and `data:` lines), or null for a comment (keep-alive)
 * or data that is not JSON.
 * @param {string} block
 * @returns {{ name: string, data: any } | null}
 */
function parseEvent(block) {
  let name = 'message';
  const data = [];
  for (const line of block.split('\n')) {
    if (line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
    if (field === 'event') name = value;
    else if (field === 'data') data.push(value);
  }
  if (data.length === 0) return null;
  try {
    return { name, data: JSON.parse(data.join('\n')) };
  } catch {
    return null;
  }
}

/**
 * The terminal WebSocket's address for a session (`sid`), or for this tab's own session by its
 * client id when `sid` is null. The browser sends the session cookie with the handshake.
 * @param {string} iid
 * @param {string | null} sid
 * @param {URLSearchParams} query
 */
function terminalSocketUrl(iid, sid, query) {
  let path = `/ws/tool-instances/${encodeURIComponent(iid)}/terminal`;
  if (sid) path += `/${encodeURIComponent(sid)}`;
  const scheme = window.location.protocol === 'https:' ? 'wss:' : 'ws:';
  return `${scheme}//${window.location.host}${path}?${new URLSearchParams(query)}`;
}
