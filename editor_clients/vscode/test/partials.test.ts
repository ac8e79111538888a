import { describe, expect, it } from 'vitest';
import { PartialStore } from '../src/partials';
import { PartialCompletionParams, isPartialCompletionParams } from '../src/protocol';

const URI = 'file:///w/a.py';

function partial(text: string, extra: Partial<PartialCompletionParams> = {}): PartialCompletionParams {
  return { uri: URI, version: 3, position: { line: 0, character: 6 }, text, done: false, requestId: 7, ...extra };
}

describe('PartialStore.merge', () => {
  it('grows one generation from the full text so far', () => {
    const store = new PartialStore();
    expect(store.merge(partial('d'))).toBe('new');
    expect(store.merge(partial('d(a'))).toBe('grew');
    expect(store.merge(partial('d(a, b):', { done: true }))).toBe('done');
    expect(store.lookup(URI, 3, 0, 6)?.text).toBe('d(a, b):');
    expect(store.lookup(URI, 3, 0, 6)?.done).toBe(true);
  });

  it('ignores anything after done, repeats, and shorter reordered texts', () => {
    const store = new PartialStore();
    store.merge(partial('d(a'));
    expect(store.merge(partial('d('))).toBe('ignored');
    expect(store.merge(partial('d(a'))).toBe('ignored');
    store.merge(partial('d(a, b)', { done: true }));
    expect(store.merge(partial('d(a, b) + more'))).toBe('ignored');
    expect(store.latest(URI)?.text).toBe('d(a, b)');
  });

  it('takes a longer text that does not extend the old one (the server rewrote it)', () => {
    const store = new PartialStore();
    store.merge(partial('abc'));
    expect(store.merge(partial('xyzw'))).toBe('grew');
    expect(store.latest(URI)?.text).toBe('xyzw');
  });

  it('a newer request replaces the old one, and late partials of the old one are dropped', () => {
    const store = new PartialStore();
    store.merge(partial('old'));
    expect(store.merge(partial('n', { requestId: 8, position: { line: 0, character: 7 }, version: 4 }))).toBe('new');
    expect(store.merge(partial('old and more'))).toBe('ignored');
    expect(store.merge(partial('older', { requestId: 5 }))).toBe('ignored');
    expect(store.latest(URI)?.requestId).toBe(8);
    expect(store.lookup(URI, 3, 0, 6)).toBeUndefined();
    expect(store.lookup(URI, 4, 0, 7)?.text).toBe('n');
  });

  it('keeps documents apart and forgets a cleared one for good', () => {
    const store = new PartialStore();
    store.merge(partial('a'));
    store.merge(partial('b', { uri: 'file:///w/b.py' }));
    store.clear(URI);
    expect(store.latest(URI)).toBeUndefined();
    expect(store.latest('file:///w/b.py')?.text).toBe('b');
    expect(store.merge(partial('a and more'))).toBe('ignored');
  });

  it('lookup needs the exact version and position', () => {
    const store = new PartialStore();
    store.merge(partial('text'));
    expect(store.lookup(URI, 4, 0, 6)).toBeUndefined();
    expect(store.lookup(URI, 3, 0, 5)).toBeUndefined();
    expect(store.lookup(URI, 3, 1, 6)).toBeUndefined();
  });
});

describe('isPartialCompletionParams', () => {
  it('accepts the documented shape, with numeric or string ids', () => {
    expect(isPartialCompletionParams(partial('x'))).toBe(true);
    expect(isPartialCompletionParams(partial('x', { requestId: 'r-1' }))).toBe(true);
  });
  it.each([null, 1, 'x', {}, { ...partial('x'), text: 3 }, { ...partial('x'), position: { line: 0 } }, { ...partial('x'), done: 'no' }])(
    'rejects %j',
    (value) => {
      expect(isPartialCompletionParams(value)).toBe(false);
    },
  );
});
