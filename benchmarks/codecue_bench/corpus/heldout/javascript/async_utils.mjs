/**
 * Small promise helpers used across the front end: debounce, retry with backoff,
 * timeouts and a concurrency-limited map.
 */

export class TimeoutError extends Error {
  constructor(ms) {
    super(`operation timed out after ${ms} ms`);
    this.name = 'TimeoutError';
  }
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Delay calls to `fn` until `wait` ms have passed without another call.
 * The returned function has `.cancel()` and `.flush()`.
 */
export function debounce(fn, wait = 200) {
  let timer = null;
  let lastArgs = null;

  function debounced(...args) {
    lastArgs = args;
    clearTimeout(timer);
    timer = setTimeout(() => {
      timer = null;
      fn.apply(this, lastArgs);
    }, wait);
  }

  debounced.cancel = () => {
    clearTimeout(timer);
    timer = null;
  };
  debounced.flush = () => {
    if (timer !== null) {
      debounced.cancel();
      fn(...lastArgs);
    }
  };
  return debounced;
}

/** Reject with TimeoutError if `promise` does not settle within `ms`. */
export function withTimeout(promise, ms) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new TimeoutError(ms)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/**
 * Call `task(attempt)` until it resolves, waiting base * 2^attempt ms (plus jitter) between tries.
 * `shouldRetry(err)` decides whether an error is worth another attempt.
 */
export async function retry(task, { retries = 3, baseDelay = 100, maxDelay = 5000, shouldRetry = () => true } = {}) {
  let lastError;
  for (let attempt = 0; attempt <= retries; attempt++) {
    try {
      return await task(attempt);
    } catch (err) {
      lastError = err;
      if (attempt === retries || !shouldRetry(err)) break;
      const delay = Math.min(maxDelay, baseDelay * 2 ** attempt);
      // Full jitter keeps many clients from retrying in lockstep.
      await sleep(Math.random() * delay);
    }
  }
  throw lastError;
}

/** Like Promise.all(items.map(fn)) but with at most `limit` calls in flight. */
export async function mapLimit(items, limit, fn) {
  if (!Number.isInteger(limit) || limit < 1) {
    throw new RangeError(`limit must be a positive integer, got ${limit}`);
  }
  const results = new Array(items.length);
  let next = 0;

  async function worker() {
    while (next < items.length) {
      const index = next++;
      results[index] = await fn(items[index], index);
    }
  }

  const workers = Array.from({ length: Math.min(limit, items.length) }, worker);
  await Promise.all(workers);
  return results;
}

/** Fetch JSON with a timeout and retries on network errors and 5xx responses. */
export async function fetchJson(url, { timeoutMs = 8000, retries = 2, headers = {} } = {}) {
  return retry(
    async () => {
      const response = await withTimeout(fetch(url, { headers: { Accept: 'application/json', ...headers } }), timeoutMs);
      if (!response.ok) {
        const error = new Error(`GET ${url} failed: ${response.status} ${response.statusText}`);
        error.status = response.status;
        throw error;
      }
      return response.json();
    },
    {
      retries,
      shouldRetry: (err) => err instanceof TimeoutError || err.status === undefined || err.status >= 500,
    },
  );
}
