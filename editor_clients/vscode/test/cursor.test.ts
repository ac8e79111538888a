import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type * as vscodeTypes from 'vscode';
import { CursorMovedHost, CursorMovedNotifier, CursorPlace } from '../src/cursor';
import { CursorMovedParams } from '../src/protocol';
import { InlineCompletionController, Next, readerFor } from '../src/provider';
import { CancellationTokenSource, InlineCompletionItem, MockTextDocument, Position } from './vscode-mock';

const URI = 'file:///w/a.py';
const DEBOUNCE = 150;

function place(line: number, character: number, version = 1, uri = URI): CursorPlace {
  return { uri, version, line, character };
}

/** A host whose cursor, state and answers the test sets; what is sent is recorded. */
function fakeHost() {
  const host = {
    at: place(0, 0) as CursorPlace | undefined,
    on: true,
    busy: false,
    sent: [] as CursorMovedParams[],
  };
  const api: CursorMovedHost = {
    active: () => host.on,
    current: () => host.at,
    known: () => host.busy,
    send: (params) => host.sent.push(params),
  };
  return { host, api };
}

describe('CursorMovedNotifier', () => {
  let host: ReturnType<typeof fakeHost>['host'];
  let notifier: CursorMovedNotifier;

  /** The cursor goes to `to`, and the editor says so. */
  const move = (to: CursorPlace | undefined) => {
    host.at = to;
    notifier.moved();
  };

  beforeEach(() => {
    vi.useFakeTimers();
    const fake = fakeHost();
    host = fake.host;
    notifier = new CursorMovedNotifier(fake.api, { enabled: true, debounceMs: DEBOUNCE });
  });
  afterEach(() => {
    notifier.dispose();
    vi.useRealTimers();
  });

  it('sends one notification, for where the cursor rests, once it has rested the debounce', async () => {
    move(place(1, 0));
    await vi.advanceTimersByTimeAsync(50);
    move(place(2, 0));
    await vi.advanceTimersByTimeAsync(50);
    move(place(3, 7));
    await vi.advanceTimersByTimeAsync(DEBOUNCE - 1);
    expect(host.sent).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(host.sent).toEqual([{ textDocument: { uri: URI }, position: { line: 3, character: 7 } }]);
    await vi.advanceTimersByTimeAsync(10 * DEBOUNCE);
    expect(host.sent).toHaveLength(1);
  });

  it('never sends faster than the debounce while the cursor keeps moving', async () => {
    for (let line = 1; line <= 20; line++) {
      move(place(line, 0));
      await vi.advanceTimersByTimeAsync(DEBOUNCE - 10);
    }
    expect(host.sent).toEqual([]);
    await vi.advanceTimersByTimeAsync(10);
    expect(host.sent).toEqual([{ textDocument: { uri: URI }, position: { line: 20, character: 0 } }]);
  });

  it('only when the place changed: not again for the same place, again once the document changed', async () => {
    move(place(4, 2));
    await vi.advanceTimersByTimeAsync(DEBOUNCE);
    move(place(4, 3));
    move(place(4, 2)); // back where it was
    await vi.advanceTimersByTimeAsync(DEBOUNCE);
    expect(host.sent).toHaveLength(1);
    move(place(4, 2, 2)); // same place, new text
    await vi.advanceTimersByTimeAsync(DEBOUNCE);
    move(place(9, 0, 2, 'file:///w/b.py'));
    await vi.advanceTimersByTimeAsync(DEBOUNCE);
    expect(host.sent.map((p) => [p.textDocument.uri, p.position.line])).toEqual([
      [URI, 4],
      [URI, 4],
      ['file:///w/b.py', 9],
    ]);
    notifier.reset(); // a restarted server knows no place
    move(place(9, 0, 2, 'file:///w/b.py'));
    await vi.advanceTimersByTimeAsync(DEBOUNCE);
    expect(host.sent).toHaveLength(4);
  });

  it('sends nothing when turned off, and a pending one is dropped', async () => {
    move(place(1, 1));
    notifier.update({ enabled: false, debounceMs: DEBOUNCE });
    await vi.advanceTimersByTimeAsync(DEBOUNCE);
    move(place(2, 1));
    await vi.advanceTimersByTimeAsync(DEBOUNCE);
    expect(host.sent).toEqual([]);
    notifier.update({ enabled: true, debounceMs: 400 });
    move(place(3, 1));
    await vi.advanceTimersByTimeAsync(DEBOUNCE);
    expect(host.sent).toEqual([]); // the new debounce applies
    await vi.advanceTimersByTimeAsync(400 - DEBOUNCE);
    expect(host.sent).toHaveLength(1);
  });

  it('sends nothing while suggestions are off or the server is down, nor for a document it does not complete', async () => {
    host.on = false;
    move(place(1, 1));
    await vi.advanceTimersByTimeAsync(DEBOUNCE);
    host.on = true;
    move(undefined); // e.g. a markdown file, or no editor
    await vi.advanceTimersByTimeAsync(DEBOUNCE);
    expect(host.sent).toEqual([]);
  });

  it('sends nothing where the server is busy or knows the place, and sends once it is not', async () => {
    host.busy = true;
    move(place(5, 5));
    await vi.advanceTimersByTimeAsync(DEBOUNCE);
    expect(host.sent).toEqual([]);
    host.busy = false;
    notifier.moved(); // the same place: it was never sent
    await vi.advanceTimersByTimeAsync(DEBOUNCE);
    expect(host.sent).toEqual([{ textDocument: { uri: URI }, position: { line: 5, character: 5 } }]);
  });
});

describe('CursorMovedNotifier with the completion controller', () => {
  // An é (1 UTF-16 unit, 2 bytes) and an emoji (2 UTF-16 units, 1 code point) before the end of line 0.
  const TEXT = 'x = "h\u00e9llo \u{1F600}"\nprint(x)\n';
  let doc: MockTextDocument;
  let cursor: Position;
  let controller: InlineCompletionController;
  let sent: CursorMovedParams[];
  let notifier: CursorMovedNotifier;
  let answer: ((text: string) => void) | undefined;
  const next: Next = () =>
    new Promise((resolve) => {
      answer = (text) => resolve([new InlineCompletionItem(text) as unknown as vscodeTypes.InlineCompletionItem]);
    });

  /** As extension.ts wires it, on a mock document. */
  beforeEach(() => {
    vi.useFakeTimers();
    doc = new MockTextDocument(URI, TEXT);
    cursor = new Position(0, 0);
    controller = new InlineCompletionController({ trigger: () => undefined, debounceMs: 0 });
    sent = [];
    notifier = new CursorMovedNotifier(
      {
        active: () => controller.enabled,
        current: () => ({ uri: URI, version: doc.version, line: cursor.line, character: cursor.character }),
        known: (at) => controller.knows(at, doc.offsetAt(cursor), readerFor(doc as unknown as vscodeTypes.TextDocument)),
        send: (params) => sent.push(params),
      },
      { enabled: true, debounceMs: DEBOUNCE },
    );
  });
  afterEach(() => {
    notifier.dispose();
    vi.useRealTimers();
  });

  const moveTo = async (to: Position) => {
    cursor = to;
    notifier.moved();
    await vi.advanceTimersByTimeAsync(DEBOUNCE);
  };
  const provide = () =>
    controller.provide(
      doc as unknown as vscodeTypes.TextDocument,
      cursor as unknown as vscodeTypes.Position,
      { triggerKind: 1, selectedCompletionInfo: undefined } as unknown as vscodeTypes.InlineCompletionContext,
      new CancellationTokenSource().token as unknown as vscodeTypes.CancellationToken,
      next,
    );

  it('positions go in UTF-16 code units, as the server counts them', async () => {
    const line = TEXT.split('\n')[0];
    await moveTo(doc.positionAt(line.length));
    expect(sent).toEqual([{ textDocument: { uri: URI }, position: { line: 0, character: line.length } }]);
    expect(line.length).toBe(Buffer.from(line, 'utf16le').length / 2);
    expect(line.length).not.toBe([...line].length); // not code points
  });

  it('nothing while a suggestion generates, is shown or is typed through; then for a new place', async () => {
    cursor = doc.positionAt(TEXT.indexOf('\n') + 1 + 'print('.length);
    const shown = provide(); // typing there asked for a completion
    await vi.advanceTimersByTimeAsync(0);
    await moveTo(cursor); // the editor's selection event for the same keystroke
    expect(sent).toEqual([]); // generating
    answer?.('x)');
    expect((await shown)?.map((item) => item.insertText)).toEqual(['x)']);
    notifier.moved();
    await vi.advanceTimersByTimeAsync(DEBOUNCE);
    expect(sent).toEqual([]); // shown, where it was asked for
    doc.text = TEXT.replace('print(', 'print(x');
    doc.version += 1;
    await moveTo(new Position(1, cursor.character + 1)); // typed through
    expect(sent).toEqual([]);

    await moveTo(new Position(0, 2)); // the user goes elsewhere
    expect(sent).toEqual([{ textDocument: { uri: URI }, position: { line: 0, character: 2 } }]);
  });
});
