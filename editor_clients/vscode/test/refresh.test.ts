import { describe, expect, it } from 'vitest';
import { Refresher } from '../src/refresh';

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve = () => {};
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

describe('Refresher', () => {
  it('runs a refresh per request when they do not overlap', async () => {
    let calls = 0;
    const refresher = new Refresher(async () => {
      calls += 1;
    });
    refresher.request();
    await Promise.resolve();
    await Promise.resolve();
    refresher.request();
    await new Promise((r) => setTimeout(r, 0));
    expect(calls).toBe(2);
  });

  it('coalesces requests that arrive while a refresh runs into one more', async () => {
    const gates = [deferred(), deferred()];
    let calls = 0;
    const refresher = new Refresher(async () => {
      const gate = gates[calls];
      calls += 1;
      await gate?.promise;
    });
    refresher.request(); // starts refresh 1
    refresher.request(); // 3 requests while it runs ...
    refresher.request();
    refresher.request();
    expect(calls).toBe(1);
    gates[0].resolve();
    await new Promise((r) => setTimeout(r, 0));
    expect(calls).toBe(2); // ... become one more refresh
    gates[1].resolve();
    await new Promise((r) => setTimeout(r, 0));
    expect(calls).toBe(2);
    refresher.request(); // idle again: a new request runs at once
    await new Promise((r) => setTimeout(r, 0));
    expect(calls).toBe(3);
  });

  it('keeps working after a failed refresh and reports it', async () => {
    const messages: string[] = [];
    let calls = 0;
    const refresher = new Refresher(async () => {
      calls += 1;
      if (calls === 1) {
        throw new Error('command not found');
      }
    }, (message) => messages.push(message));
    refresher.request();
    await new Promise((r) => setTimeout(r, 0));
    refresher.request();
    await new Promise((r) => setTimeout(r, 0));
    expect(calls).toBe(2);
    expect(messages).toEqual(['refreshing the inline suggestion failed: Error: command not found']);
  });
});
