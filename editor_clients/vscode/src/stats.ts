/** Formatting `codecue/stats` for the status bar and the stats view. */
import { LanguageStats, StatsResult } from './protocol';

const percent = (rate: number) => `${Math.round((Number(rate) || 0) * 100)}%`;

/** Status bar text: acceptance and tokens/s of the session, or a state word. */
export function statusText(state: 'off' | 'starting' | 'running' | 'down', stats?: StatsResult): string {
  if (state === 'off') {
    return '$(circle-slash) CodeCue';
  }
  if (state === 'down') {
    return '$(warning) CodeCue';
  }
  if (state === 'starting') {
    return '$(sync~spin) CodeCue';
  }
  const total = stats?.total;
  if (!total || !(total.completions > 0)) {
    return '$(sparkle) CodeCue';
  }
  return `$(sparkle) CodeCue ${percent(total.acceptanceRate)} · ${Math.round(total.tokensPerSecond)} tok/s`;
}

function row(name: string, s: LanguageStats): string {
  return (
    `${name}: ${s.completions} completions, acceptance ${percent(s.acceptanceRate)}, ` +
    `${(Number(s.tokensPerSecond) || 0).toFixed(1)} tokens/s, TTFT ${Math.round(s.ttftMs)} ms, ` +
    `TPOT ${(Number(s.tpotMs) || 0).toFixed(1)} ms, speculation ${s.speculation ? 'on' : 'off'}`
  );
}

/** One line per language, then the total. */
export function statsLines(stats: StatsResult): string[] {
  const languages = Object.keys(stats.languages ?? {}).sort();
  const lines = languages.map((language) => row(language, stats.languages[language]));
  if (stats.total) {
    lines.push(row('total', stats.total));
  }
  return lines.length > 0 ? lines : ['no completions yet'];
}
