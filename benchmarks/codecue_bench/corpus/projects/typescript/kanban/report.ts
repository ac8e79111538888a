// Board summaries for the daily stand-up: load per person, overdue cards, columns at their limit.

import { BoardStore } from "./store";
import { BoardState, Card, Column, isOverdue, PRIORITY_WEIGHT, Priority } from "./types";

export interface StandupReport {
  overdue: Card[];
  loadByAssignee: Map<string, number>;
  fullColumns: string[];
  urgentCount: number;
}

export function cardsIn(state: BoardState, column: Column): Card[] {
  const cards: Card[] = [];
  for (const id of column.cardIds) {
    const card = state.cards.get(id);
    if (card) {
      cards.push(card);
    }
  }
  return cards;
}

export function sortByPriority(cards: Card[]): Card[] {
  return [...cards].sort((a, b) => PRIORITY_WEIGHT[b.priority] - PRIORITY_WEIGHT[a.priority]);
}

export function loadByAssignee(state: BoardState): Map<string, number> {
  const load = new Map<string, number>();
  for (const card of state.cards.values()) {
    if (card.assignee === null) {
      continue;
    }
    load.set(card.assignee, (load.get(card.assignee) ?? 0) + PRIORITY_WEIGHT[card.priority] + 1);
  }
  return load;
}

export function countByPriority(state: BoardState, priority: Priority): number {
  let count = 0;
  for (const card of state.cards.values()) {
    if (card.priority === priority) {
      count += 1;
    }
  }
  return count;
}

export function standup(store: BoardStore, now: Date): StandupReport {
  const state = store.snapshot();
  const overdue = sortByPriority([...state.cards.values()].filter((card) => isOverdue(card, now)));
  const fullColumns = state.columns
    .filter((column) => column.wipLimit !== null && column.cardIds.length >= column.wipLimit)
    .map((column) => column.name);
  return {
    overdue,
    loadByAssignee: loadByAssignee(state),
    fullColumns,
    urgentCount: countByPriority(state, "urgent"),
  };
}

export function formatStandup(report: StandupReport): string {
  const lines = [`${report.overdue.length} overdue, ${report.urgentCount} urgent`];
  for (const card of report.overdue) {
    lines.push(`  overdue: ${card.title} (${card.assignee ?? "unassigned"}, ${card.priority})`);
  }
  for (const [person, load] of report.loadByAssignee) {
    lines.push(`  ${person}: load ${load}`);
  }
  if (report.fullColumns.length > 0) {
    lines.push(`  at WIP limit: ${report.fullColumns.join(", ")}`);
  }
  return lines.join("\n");
}
