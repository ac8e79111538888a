import { describe, expect, it } from 'vitest';
import { CONTEXT_CHARS, CompletionCache, TextReader } from '../src/cache';

const URI = 'file:///w/a.py';
const readerOf = (text: string): TextReader => (start, end) => text.slice(start, end);

describe('CompletionCache', () => {
  it('answers at the same position with the whole text', () => {
    const cache = new CompletionCache();
    const doc = 'def ad';
    cache.put(URI, 6, 'd(a, b):', readerOf(doc));
    expect(cache.lookup(URI, 6, readerOf(doc))).toBe('d(a, b):');
  });

  it('answers type-through with the rest, and stops when the typing goes another way', () => {
    const cache = new CompletionCache();
    cache.put(URI, 6, 'd(a, b):', readerOf('def ad'));
    expect(cache.lookup(URI, 8, readerOf('def add('))).toBe('a, b):');
    expect(cache.lookup(URI, 8, readerOf('def adz('))).toBeUndefined();
    // Typed in full: nothing left to suggest.
    expect(cache.lookup(URI, 14, readerOf('def add(a, b):'))).toBeUndefined();
  });

  it('misses when the text before the completion changed', () => {
    const cache = new CompletionCache();
    cache.put(URI, 6, 'd(a, b):', readerOf('def ad'));
    expect(cache.lookup(URI, 6, readerOf('xyz ad'))).toBeUndefined();
    expect(cache.lookup('file:///w/other.py', 6, readerOf('def ad'))).toBeUndefined();
  });

  it('keeps only the context it needs', () => {
    const cache = new CompletionCache();
    const long = 'x'.repeat(CONTEXT_CHARS * 3) + 'def ad';
    cache.put(URI, long.length, 'd()', readerOf(long));
    const editedFarAway = 'y' + long.slice(1);
    expect(cache.lookup(URI, long.length, readerOf(editedFarAway))).toBe('d()');
  });

  it('evicts the least recently used entry', () => {
    const cache = new CompletionCache(2);
    const doc = 'a\nb\nc\n';
    const read = readerOf(doc);
    cache.put(URI, 1, 'A', read);
    cache.put(URI, 3, 'B', read);
    expect(cache.lookup(URI, 1, read)).toBe('A'); // now A is the most recent
    cache.put(URI, 5, 'C', read);
    expect(cache.size).toBe(2);
    expect(cache.lookup(URI, 3, read)).toBeUndefined();
    expect(cache.lookup(URI, 1, read)).toBe('A');
    expect(cache.lookup(URI, 5, read)).toBe('C');
  });

  it('prefers the most recent answer when two cover the cursor', () => {
    const cache = new CompletionCache();
    cache.put(URI, 6, 'd(a)', readerOf('def ad'));
    cache.put(URI, 7, '(a, b)', readerOf('def add'));
    expect(cache.lookup(URI, 7, readerOf('def add'))).toBe('(a, b)');
  });

  it('ignores empty texts, forgets a document, and rejects a bad capacity', () => {
    const cache = new CompletionCache();
    cache.put(URI, 0, '', readerOf(''));
    expect(cache.size).toBe(0);
    cache.put(URI, 0, 'x', readerOf(''));
    cache.put('file:///w/b.py', 0, 'y', readerOf(''));
    cache.clearDocument(URI);
    expect(cache.lookup(URI, 0, readerOf(''))).toBeUndefined();
    expect(cache.lookup('file:///w/b.py', 0, readerOf(''))).toBe('y');
    expect(() => new CompletionCache(0)).toThrow(RangeError);
  });
});
