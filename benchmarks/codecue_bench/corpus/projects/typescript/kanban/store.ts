// The board's state and the moves that change it; every change notifies the listeners.

import { BoardState, Card, CardId, Column, ColumnId, WipLimitError } from "./types";

export type Listener = (state: BoardState) => void;

export class BoardStore {
  private state: BoardState = { columns: [], cards: new Map() };
  private listeners: Listener[] = [];

  subscribe(listener: Listener): () => void {
    this.listeners.push(listener);
    return () => {
      this.listeners = this.listeners.filter((l) => l !== listener);
    };
  }

  snapshot(): BoardState {
    return this.state;
  }

  addColumn(id: ColumnId, name: string, wipLimit: number | null = null): Column {
    const column: Column = { id, name, wipLimit, cardIds: [] };
    this.state.columns.push(column);
    this.emit();
    return column;
  }

  findColumn(id: ColumnId): Column {
    const column = this.state.columns.find((c) => c.id === id);
    if (!column) {
      throw new Error(`no column ${id}`);
    }
    return column;
  }

  columnOf(cardId: CardId): Column | undefined {
    return this.state.columns.find((c) => c.cardIds.includes(cardId));
  }

  addCard(columnId: ColumnId, card: Card): void {
    const column = this.findColumn(columnId);
    assertRoom(column);
    this.state.cards.set(card.id, card);
    column.cardIds.push(card.id);
    this.emit();
  }

  moveCard(cardId: CardId, to: ColumnId, index?: number): void {
    const from = this.columnOf(cardId);
    const target = this.findColumn(to);
    if (from && from.id !== target.id) {
      assertRoom(target);
    }
    if (from) {
      from.cardIds = from.cardIds.filter((id) => id !== cardId);
    }
    const at = index === undefined ? target.cardIds.length : Math.min(index, target.cardIds.length);
    target.cardIds.splice(at, 0, cardId);
    this.emit();
  }

  private emit(): void {
    for (const listener of this.listeners) {
      listener(this.state);
    }
  }
}

export function assertRoom(column: Column): void {
  if (column.wipLimit !== null && column.cardIds.length >= column.wipLimit) {
    throw new WipLimitError(column);
  }
}
