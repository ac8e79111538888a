import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type * as vscodeTypes from 'vscode';
import { ACCEPTED_COMMAND, InlineCompletionController, Next, acceptable } from '../src/provider';
import { PartialCompletionParams } from '../src/protocol';
import { CancellationTokenSource, InlineCompletionItem, MockTextDocument, Position } from './vscode-mock';

const URI = 'file:///w/a.py';
const CONTEXT = { triggerKind: 1, selectedCompletionInfo: undefined } as unknown as vscodeTypes.InlineCompletionContext;

/** A server stand-in: each call to `next` is recorded with a promise the test resolves. */
function fakeServer() {
  const calls: {
    position: Position;
    token: vscodeTypes.CancellationToken;
    resolve: (text: string | null) => void;
  }[] = [];
  const next: Next = (_document, position, _context, token) =>
    new Promise((resolve) => {
      calls.push({
        position: position as unknown as Position,
        token,
        resolve: (text) => resolve(text === null ? null : [new InlineCompletionItem(text) as unknown as vscodeTypes.InlineCompletionItem]),
      });
    });
  return { calls, next };
}

function texts(items: vscodeTypes.InlineCompletionItem[] | null): string[] | null {
  return items ? items.map((item) => item.insertText as string) : null;
}

function partial(doc: MockTextDocument, at: Position, text: string, done = false, requestId = 1): PartialCompletionParams {
  return { uri: URI, version: doc.version, position: { line: at.line, character: at.character }, text, done, requestId };
}

describe('InlineCompletionController', () => {
  let doc: MockTextDocument;
  let trigger: ReturnType<typeof vi.fn>;
  let controller: InlineCompletionController;
  let server: ReturnType<typeof fakeServer>;

  const provide = (token = new CancellationTokenSource().token) =>
    controller.provide(
      doc as unknown as vscodeTypes.TextDocument,
      doc.end() as unknown as vscodeTypes.Position,
      CONTEXT,
      token as unknown as vscodeTypes.CancellationToken,
      server.next,
    );

  beforeEach(() => {
    vi.useFakeTimers();
    doc = new MockTextDocument(URI, 'def ad');
    trigger = vi.fn();
    controller = new InlineCompletionController({ trigger, debounceMs: 50 });
    server = fakeServer();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('shows the stream as it grows, without restarting or cancelling the generation', async () => {
    const first = new CancellationTokenSource();
    const answer = provide(first.token);
    await vi.advanceTimersByTimeAsync(50);
    expect(server.calls).toHaveLength(1);
    const at = doc.end();

    controller.onPartial(partial(doc, at, 'd(a'));
    expect(trigger).toHaveBeenCalledTimes(1);
    first.cancel(); // VS Code cancels the running call when the trigger re-queries
    expect(texts(await provide())).toEqual(['d(a']);

    controller.onPartial(partial(doc, at, 'd(a, b):'));
    expect(trigger).toHaveBeenCalledTimes(2);
    expect(texts(await provide())).toEqual(['d(a, b):']);

    server.calls[0].resolve('d(a, b):\n    return a + b');
    // The first call was cancelled by the editor: it asks once more, and the cache has the final text.
    expect(await answer).toBeNull();
    expect(trigger).toHaveBeenCalledTimes(3);
    expect(texts(await provide())).toEqual(['d(a, b):\n    return a + b']);

    expect(server.calls).toHaveLength(1);
    expect(server.calls[0].token.isCancellationRequested).toBe(false);
  });

  it('returns the final items directly when nobody re-queried', async () => {
    const answer = provide();
    await vi.advanceTimersByTimeAsync(50);
    server.calls[0].resolve('d(a, b):');
    expect(texts(await answer)).toEqual(['d(a, b):']);
    expect(trigger).not.toHaveBeenCalled();
  });

  it('answers type-through from the cache, without the server', async () => {
    const answer = provide();
    await vi.advanceTimersByTimeAsync(50);
    server.calls[0].resolve('d(a, b):');
    await answer;
    doc.type('d(');
    expect(texts(await provide())).toEqual(['a, b):']);
    expect(server.calls).toHaveLength(1);
  });

  it('type-through while streaming shows the rest of the stream and keeps the generation', async () => {
    const answer = provide();
    await vi.advanceTimersByTimeAsync(50);
    controller.onPartial(partial(doc, doc.end(), 'd(a, b'));
    doc.type('d(');
    expect(texts(await provide())).toEqual(['a, b']);
    expect(server.calls).toHaveLength(1);
    expect(server.calls[0].token.isCancellationRequested).toBe(false);
    server.calls[0].resolve('d(a, b):');
    await answer;
  });

  it('typing that goes another way cancels the stale generation and asks again', async () => {
    const answer = provide();
    await vi.advanceTimersByTimeAsync(50);
    const at = doc.end();
    controller.onPartial(partial(doc, at, 'd(a'));
    doc.type('z');
    const second = provide();
    expect(server.calls[0].token.isCancellationRequested).toBe(true);
    await vi.advanceTimersByTimeAsync(50);
    expect(server.calls).toHaveLength(2);
    // A late partial of the stale generation does not re-trigger or show.
    trigger.mockClear();
    controller.onPartial(partial(doc, at, 'd(a, b'));
    expect(trigger).not.toHaveBeenCalled();
    server.calls[0].resolve(null);
    expect(await answer).toBeNull();
    server.calls[1].resolve('pass');
    expect(texts(await second)).toEqual(['pass']);
  });

  it('debounces: while typing fast only the last keystroke reaches the server', async () => {
    const answers = [];
    for (const ch of 'd(a') {
      doc.type(ch);
      answers.push(provide());
      await vi.advanceTimersByTimeAsync(20);
    }
    await vi.advanceTimersByTimeAsync(50);
    expect(server.calls).toHaveLength(1);
    expect(server.calls[0].position).toEqual(doc.end());
    expect(await answers[0]).toBeNull();
    expect(await answers[1]).toBeNull();
    server.calls[0].resolve(', b):');
    expect(texts(await answers[2])).toEqual([', b):']);
  });

  it('a cancelled editor token during the debounce sends nothing', async () => {
    const source = new CancellationTokenSource();
    const answer = provide(source.token);
    source.cancel();
    await vi.advanceTimersByTimeAsync(100);
    expect(await answer).toBeNull();
    expect(server.calls).toHaveLength(0);
  });

  it('ignores partials for other documents, positions, and malformed ones', async () => {
    const answer = provide();
    await vi.advanceTimersByTimeAsync(50);
    controller.onPartial({ ...partial(doc, doc.end(), 'x'), uri: 'file:///w/other.py' });
    controller.onPartial(partial(doc, new Position(0, 2), 'x'));
    controller.onPartial({ uri: URI, text: 5 });
    controller.onPartial(null);
    expect(trigger).not.toHaveBeenCalled();
    server.calls[0].resolve('d()');
    await answer;
  });

  it('when off, answers nothing and sends nothing', async () => {
    controller.enabled = false;
    const answer = provide();
    await vi.advanceTimersByTimeAsync(100);
    expect(await answer).toBeNull();
    expect(server.calls).toHaveLength(0);
  });

  it('a failed request answers nothing and the next one works', async () => {
    const failing: Next = () => Promise.reject(new Error('server went away'));
    const log = vi.fn();
    controller = new InlineCompletionController({ trigger, debounceMs: 0, log });
    const answer = controller.provide(
      doc as unknown as vscodeTypes.TextDocument,
      doc.end() as unknown as vscodeTypes.Position,
      CONTEXT,
      new CancellationTokenSource().token as unknown as vscodeTypes.CancellationToken,
      failing,
    );
    await vi.advanceTimersByTimeAsync(1);
    expect(await answer).toBeNull();
    expect(log).toHaveBeenCalledWith(expect.stringContaining('server went away'));
    const second = provide();
    await vi.advanceTimersByTimeAsync(1);
    server.calls[0].resolve('d()');
    expect(texts(await second)).toEqual(['d()']);
  });

  it('forgets a closed document', async () => {
    const answer = provide();
    await vi.advanceTimersByTimeAsync(50);
    server.calls[0].resolve('d()');
    await answer;
    controller.forget(URI);
    const again = provide();
    await vi.advanceTimersByTimeAsync(50);
    expect(server.calls).toHaveLength(2);
    server.calls[1].resolve('d(x)');
    expect(texts(await again)).toEqual(['d(x)']);
  });
});

describe('accepts', () => {
  it('every item tells the server when it is accepted whole, with its length', () => {
    const item = acceptable('return x', URI, new Position(3, 4) as unknown as vscodeTypes.Position);
    expect(item.insertText).toBe('return x');
    expect(item.command).toEqual({ command: ACCEPTED_COMMAND, title: 'accepted', arguments: [URI, 'whole', 8] });
  });
});
