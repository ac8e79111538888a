// Cards, columns and boards of a small kanban tracker.

export type CardId = string;
export type ColumnId = string;

export type Priority = "low" | "normal" | "high" | "urgent";

export interface Card {
  id: CardId;
  title: string;
  assignee: string | null;
  priority: Priority;
  labels: string[];
  createdAt: Date;
  dueAt?: Date;
}

export interface Column {
  id: ColumnId;
  name: string;
  wipLimit: number | null;
  cardIds: CardId[];
}

export interface BoardState {
  columns: Column[];
  cards: Map<CardId, Card>;
}

export const PRIORITY_WEIGHT: Record<Priority, number> = {
  low: 0,
  normal: 1,
  high: 2,
  urgent: 3,
};

export class WipLimitError extends Error {
  constructor(public readonly column: Column) {
    super(`column ${column.name} is at its WIP limit of ${column.wipLimit}`);
  }
}

export function isOverdue(card: Card, now: Date): boolean {
  return card.dueAt !== undefined && card.dueAt.getTime() < now.getTime();
}
