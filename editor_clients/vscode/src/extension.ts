/**
 * CodeCue for VS Code: starts `codecue serve --stdio` through vscode-languageclient, shows its inline
 * completions (LSP 3.18 textDocument/inlineCompletion) streaming as ghost text, and puts the session's
 * acceptance rate and tokens/s in the status bar.
 */
import * as vscode from 'vscode';
import { LanguageClient, LanguageClientOptions, ServerOptions, State, TransportKind } from 'vscode-languageclient/node';
import { CursorMovedNotifier } from './cursor';
import { ACCEPTED, CURSOR_MOVED, PARTIAL_COMPLETION, STATS, StatsResult } from './protocol';
import { ACCEPTED_COMMAND, InlineCompletionController, readerFor } from './provider';
import { Refresher } from './refresh';
import { Settings, documentSelector, initializationOptions, needsRestart, readSettings } from './settings';
import { statsLines, statusText } from './stats';

const TRIGGER_INLINE_SUGGEST = 'editor.action.inlineSuggest.trigger';
const HIDE_INLINE_SUGGEST = 'editor.action.inlineSuggest.hide';

let client: LanguageClient | undefined;
let settings: Settings;
let controller: InlineCompletionController;
let cursorMoved: CursorMovedNotifier;
let statusBar: vscode.StatusBarItem;
let output: vscode.LogOutputChannel;
let lastStats: StatsResult | undefined;
let statsTimer: ReturnType<typeof setInterval> | undefined;
let statsRefreshPending = false;

function loadSettings(): Settings {
  const config = vscode.workspace.getConfiguration('codecue');
  const { settings: loaded, problems } = readSettings((key) => {
    const inspected = config.inspect(key);
    return inspected?.workspaceFolderValue ?? inspected?.workspaceValue ?? inspected?.globalValue;
  });
  for (const problem of problems) {
    output.appendLine(problem);
    void vscode.window.showWarningMessage(`CodeCue: ${problem}`);
  }
  return loaded;
}

function serverState(): 'off' | 'starting' | 'running' | 'down' {
  if (!settings.enabled || !controller.enabled) {
    return 'off';
  }
  if (!client) {
    return 'down';
  }
  switch (client.state) {
    case State.Running:
      return 'running';
    case State.Starting:
      return 'starting';
    default:
      return 'down';
  }
}

function updateStatusBar(): void {
  statusBar.text = statusText(serverState(), lastStats);
  const tooltip = new vscode.MarkdownString(
    lastStats ? statsLines(lastStats).map((line) => `- ${line}`).join('\n') : 'No completions yet',
  );
  tooltip.appendMarkdown('\n\nClick for CodeCue stats');
  statusBar.tooltip = tooltip;
  statusBar.show();
}

async function fetchStats(): Promise<StatsResult | undefined> {
  if (!client || client.state !== State.Running) {
    return undefined;
  }
  try {
    lastStats = await client.sendRequest<StatsResult>(STATS, {});
  } catch (error) {
    output.appendLine(`codecue/stats failed: ${String(error)}`);
  }
  updateStatusBar();
  return lastStats;
}

/** Refresh the stats soon after answers, at most once every two seconds. */
function scheduleStatsRefresh(): void {
  if (statsRefreshPending) {
    return;
  }
  statsRefreshPending = true;
  setTimeout(() => {
    statsRefreshPending = false;
    void fetchStats();
  }, 2000);
}

function restartStatsTimer(): void {
  if (statsTimer) {
    clearInterval(statsTimer);
    statsTimer = undefined;
  }
  if (settings.statsIntervalSeconds > 0) {
    statsTimer = setInterval(() => void fetchStats(), settings.statsIntervalSeconds * 1000);
  }
}

async function startClient(): Promise<void> {
  const serverOptions: ServerOptions = {
    command: settings.serverPath,
    args: settings.serverArgs,
    transport: TransportKind.stdio,
  };
  const clientOptions: LanguageClientOptions = {
    documentSelector: documentSelector(settings),
    initializationOptions: initializationOptions(settings),
    outputChannel: output,
    middleware: {
      provideInlineCompletionItems: (document, position, context, token, next) =>
        controller.provide(document, position, context, token, next),
    },
  };
  const created = new LanguageClient('codecue', 'CodeCue', serverOptions, clientOptions);
  client = created;
  created.onDidChangeState(() => updateStatusBar());
  created.onNotification(PARTIAL_COMPLETION, (params: unknown) => controller.onPartial(params));
  try {
    await created.start();
    // A (re)started server knows no place yet: tell it where the cursor is.
    cursorMoved.reset();
    cursorMoved.moved();
  } catch (error) {
    const message =
      `CodeCue: could not start the server (${settings.serverPath} ${settings.serverArgs.join(' ')}): ` +
      `${error instanceof Error ? error.message : String(error)}. Set codecue.serverPath, or install codecue.`;
    output.appendLine(message);
    void vscode.window.showErrorMessage(message);
  }
  updateStatusBar();
}

async function stopClient(): Promise<void> {
  const running = client;
  client = undefined;
  controller.cancelInflight();
  if (running) {
    try {
      await running.stop();
    } catch (error) {
      output.appendLine(`stopping the server: ${String(error)}`);
    }
  }
}

/** Accept a word or a line of the suggestion (VS Code's own command) and tell the server how much was taken. */
async function acceptPart(kind: 'word' | 'line', action: 'acceptNextWord' | 'acceptNextLine'): Promise<void> {
  const editor = vscode.window.activeTextEditor;
  const before = editor ? editor.document.offsetAt(editor.selection.active) : undefined;
  await vscode.commands.executeCommand(`editor.action.inlineSuggest.${action}`);
  if (!editor || before === undefined) {
    return;
  }
  const characters = editor.document.offsetAt(editor.selection.active) - before;
  if (characters > 0) {
    const uri = editor.document.uri.toString();
    client?.sendNotification(ACCEPTED, { textDocument: { uri }, kind, characters }).catch(() => undefined);
  }
}

async function showStats(): Promise<void> {
  const stats = await fetchStats();
  if (!stats) {
    void vscode.window.showWarningMessage('CodeCue: the server is not running, no stats.');
    return;
  }
  const lines = statsLines(stats);
  output.appendLine('CodeCue stats:');
  for (const line of lines) {
    output.appendLine(`  ${line}`);
  }
  void vscode.window.showInformationMessage(`CodeCue — ${lines[lines.length - 1]}`, 'Details').then((choice) => {
    if (choice === 'Details') {
      output.show(true);
    }
  });
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  output = vscode.window.createOutputChannel('CodeCue', { log: true });
  settings = loadSettings();
  const refresher = new Refresher(async () => {
    // A visible suggestion is not re-queried by the trigger alone (see refresh.ts).
    await vscode.commands.executeCommand(HIDE_INLINE_SUGGEST);
    await vscode.commands.executeCommand(TRIGGER_INLINE_SUGGEST);
  }, (message) => output.appendLine(message));
  controller = new InlineCompletionController({
    trigger: () => refresher.request(),
    debounceMs: settings.debounceMs,
    onAnswer: scheduleStatsRefresh,
    log: (message) => output.appendLine(message),
  });
  controller.enabled = settings.enabled;
  cursorMoved = new CursorMovedNotifier(
    {
      active: () => settings.enabled && controller.enabled && client?.state === State.Running,
      current: () => {
        const editor = vscode.window.activeTextEditor;
        if (!editor || vscode.languages.match(documentSelector(settings), editor.document) === 0) {
          return undefined; // not a document the server completes
        }
        const at = editor.selection.active;
        return { uri: editor.document.uri.toString(), version: editor.document.version, line: at.line, character: at.character };
      },
      known: (place) => {
        const document = vscode.window.activeTextEditor?.document;
        if (!document || document.uri.toString() !== place.uri) {
          return true;
        }
        const offset = document.offsetAt(new vscode.Position(place.line, place.character));
        return controller.knows(place, offset, readerFor(document));
      },
      send: (params) => {
        client?.sendNotification(CURSOR_MOVED, params).catch((error: unknown) => {
          output.appendLine(`${CURSOR_MOVED} failed: ${String(error)}`);
        });
      },
    },
    settings.cursorMoved,
  );
  statusBar = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Right, 100);
  statusBar.command = 'codecue.showStats';
  context.subscriptions.push(output, statusBar);

  context.subscriptions.push(
    vscode.commands.registerCommand('codecue.toggle', () => {
      controller.enabled = !controller.enabled;
      if (!controller.enabled) {
        controller.cancelInflight();
        cursorMoved.cancel();
      }
      updateStatusBar();
      void vscode.window.showInformationMessage(`CodeCue: suggestions ${controller.enabled ? 'on' : 'off'}`);
    }),
    vscode.commands.registerCommand('codecue.showStats', showStats),
    vscode.commands.registerCommand('codecue.restartServer', async () => {
      await stopClient();
      await startClient();
    }),
    vscode.commands.registerCommand(ACCEPTED_COMMAND, (uri: string, kind: string, characters: number) => {
      client?.sendNotification(ACCEPTED, { textDocument: { uri }, kind, characters }).catch(() => undefined);
    }),
    vscode.commands.registerCommand('codecue.acceptWord', () => acceptPart('word', 'acceptNextWord')),
    vscode.commands.registerCommand('codecue.acceptLine', () => acceptPart('line', 'acceptNextLine')),
    vscode.workspace.onDidCloseTextDocument((document) => controller.forget(document.uri.toString())),
    // Where the cursor comes to rest, after a pause (codecue/cursorMoved).
    vscode.window.onDidChangeTextEditorSelection((event) => {
      if (event.textEditor === vscode.window.activeTextEditor) {
        cursorMoved.moved();
      }
    }),
    vscode.window.onDidChangeActiveTextEditor(() => cursorMoved.moved()),
    { dispose: () => cursorMoved.dispose() },
    vscode.workspace.onDidChangeConfiguration(async (event) => {
      if (!event.affectsConfiguration('codecue')) {
        return;
      }
      const previous = settings;
      settings = loadSettings();
      controller.enabled = settings.enabled;
      controller.debouncer.delayMs = settings.debounceMs;
      cursorMoved.update(settings.cursorMoved);
      restartStatsTimer();
      if (needsRestart(previous, settings) || previous.languages.join() !== settings.languages.join()) {
        await stopClient();
        await startClient();
      }
      updateStatusBar();
    }),
  );
  restartStatsTimer();
  updateStatusBar();
  await startClient();
}

export async function deactivate(): Promise<void> {
  if (statsTimer) {
    clearInterval(statsTimer);
  }
  await stopClient();
}
