import { describe, expect, it } from 'vitest';
import { StatsResult } from '../src/protocol';
import { statsLines, statusText } from '../src/stats';

const row = { completions: 12, acceptanceRate: 0.746, ttftMs: 41.6, tpotMs: 8.52, tokensPerSecond: 117.6, speculation: true };
const stats: StatsResult = { languages: { python: row, go: { ...row, completions: 0, speculation: false } }, total: row };

describe('stats formatting', () => {
  it('status bar: acceptance and tokens/s once there are completions', () => {
    expect(statusText('running', stats)).toBe('$(sparkle) CodeCue 75% · 118 tok/s');
    expect(statusText('running', { languages: {}, total: { ...row, completions: 0 } })).toBe('$(sparkle) CodeCue');
    expect(statusText('running')).toBe('$(sparkle) CodeCue');
    expect(statusText('off', stats)).toBe('$(circle-slash) CodeCue');
    expect(statusText('down', stats)).toBe('$(warning) CodeCue');
  });

  it('one line per language, sorted, then the total', () => {
    expect(statsLines(stats)).toEqual([
      'go: 0 completions, acceptance 75%, 117.6 tokens/s, TTFT 42 ms, TPOT 8.5 ms, speculation off',
      'python: 12 completions, acceptance 75%, 117.6 tokens/s, TTFT 42 ms, TPOT 8.5 ms, speculation on',
      'total: 12 completions, acceptance 75%, 117.6 tokens/s, TTFT 42 ms, TPOT 8.5 ms, speculation on',
    ]);
    expect(statsLines({ languages: {}, total: undefined as never })).toEqual(['no completions yet']);
  });
});
