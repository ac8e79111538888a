import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Debouncer } from '../src/debounce';
import { CancellationTokenSource } from './vscode-mock';

describe('Debouncer', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('goes ahead after the delay', async () => {
    const debouncer = new Debouncer(100);
    const waiting = debouncer.wait();
    let settled: boolean | undefined;
    void waiting.then((go) => (settled = go));
    await vi.advanceTimersByTimeAsync(99);
    expect(settled).toBeUndefined();
    await vi.advanceTimersByTimeAsync(1);
    expect(settled).toBe(true);
  });

  it('a newer wait makes the older one give up at once', async () => {
    const debouncer = new Debouncer(100);
    const first = debouncer.wait();
    await vi.advanceTimersByTimeAsync(50);
    const second = debouncer.wait();
    expect(await first).toBe(false);
    await vi.advanceTimersByTimeAsync(100);
    expect(await second).toBe(true);
  });

  it('gives up when the token is cancelled, or was already', async () => {
    const debouncer = new Debouncer(100);
    const source = new CancellationTokenSource();
    const waiting = debouncer.wait(source.token);
    source.cancel();
    expect(await waiting).toBe(false);
    expect(await debouncer.wait(source.token)).toBe(false);
  });

  it('cancel() releases the pending wait, and a zero delay still waits for the next tick', async () => {
    const debouncer = new Debouncer(0);
    const waiting = debouncer.wait();
    debouncer.cancel();
    expect(await waiting).toBe(false);
    const next = debouncer.wait();
    await vi.advanceTimersByTimeAsync(0);
    expect(await next).toBe(true);
  });

  it('rejects a negative delay', () => {
    expect(() => new Debouncer(-1)).toThrow(RangeError);
  });
});
