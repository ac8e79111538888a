'use strict';

// A tiny JSON API for notes on top of node:http, with a hand-rolled router.
// Routes: GET /notes, GET /notes/:id, POST /notes, DELETE /notes/:id, GET /health

const http = require('node:http');
const { randomUUID } = require('node:crypto');

const MAX_BODY_BYTES = 64 * 1024;

class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

class Router {
  constructor() {
    this.routes = [];
  }

  add(method, pattern, handler) {
    // "/notes/:id" -> /^\/notes\/([^/]+)$/ with keys ["id"]
    const keys = [];
    const source = pattern.replace(/:(\w+)/g, (_, key) => {
      keys.push(key);
      return '([^/]+)';
    });
    this.routes.push({ method, regex: new RegExp(`^${source}$`), keys, handler });
    return this;
  }

  match(method, pathname) {
    let pathMatched = false;
    for (const route of this.routes) {
      const m = route.regex.exec(pathname);
      if (!m) continue;
      pathMatched = true;
      if (route.method !== method) continue;
      const params = {};
      route.keys.forEach((key, i) => {
        params[key] = decodeURIComponent(m[i + 1]);
      });
      return { handler: route.handler, params };
    }
    throw new HttpError(pathMatched ? 405 : 404, pathMatched ? 'method not allowed' : 'not found');
  }
}

function readJson(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    req.on('data', (chunk) => {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) {
        reject(new HttpError(413, 'request body too large'));
        req.destroy();
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => {
      try {
        resolve(JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}'));
      } catch (err) {
        reject(new HttpError(400, `invalid JSON: ${err.message}`));
      }
    });
    req.on('error', reject);
  });
}

function sendJson(res, status, payload) {
  const body = JSON.stringify(payload);
  res.writeHead(status, {
    'Content-Type': 'application/json; charset=utf-8',
    'Content-Length': Buffer.byteLength(body),
  });
  res.end(body);
}

function createApp(store = new Map()) {
  const router = new Router()
    .add('GET', '/health', async () => ({ status: 200, body: { ok: true, notes: store.size } }))
    .add('GET', '/notes', async (req, params, url) => {
      const tag = url.searchParams.get('tag');
      const notes = [...store.values()].filter((n) => !tag || n.tags.includes(tag));
      return { status: 200, body: notes };
    })
    .add('GET', '/notes/:id', async (req, { id }) => {
      const note = store.get(id);
      if (!note) throw new HttpError(404, `no note ${id}`);
      return { status: 200, body: note };
    })
    .add('POST', '/notes', async (req) => {
      const { title, text = '', tags = [] } = await readJson(req);
      if (typeof title !== 'string' || title.trim() === '') {
        throw new HttpError(422, 'title must be a non-empty string');
      }
      const note = { id: randomUUID(), title: title.trim(), text, tags, createdAt: new Date().toISOString() };
      store.set(note.id, note);
      return { status: 201, body: note };
    })
    .add('DELETE', '/notes/:id', async (req, { id }) => {
      if (!store.delete(id)) throw new HttpError(404, `no note ${id}`);
      return { status: 204, body: null };
    });

  return async function handle(req, res) {
    const url = new URL(req.url, 'http://localhost');
    try {
      const { handler, params } = router.match(req.method, url.pathname);
      const { status, body } = await handler(req, params, url);
      if (body === null) {
        res.writeHead(status).end();
      } else {
        sendJson(res, status, body);
      }
    } catch (err) {
      const status = err instanceof HttpError ? err.status : 500;
      if (status === 500) console.error(err);
      sendJson(res, status, { error: status === 500 ? 'internal error' : err.message });
    }
  };
}

if (require.main === module) {
  const port = Number(process.env.PORT || 8080);
  http.createServer(createApp()).listen(port, '127.0.0.1', () => {
    console.log(`notes API listening on http://127.0.0.1:${port}`);
  });
}

module.exports = { createApp, Router, HttpError };
