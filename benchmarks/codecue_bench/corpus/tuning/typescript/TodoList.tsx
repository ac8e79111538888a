import React, { useState } from "react";

export interface Todo {
  id: number;
  title: string;
  done: boolean;
}

interface Props {
  initial: Todo[];
  onChange?: (todos: Todo[]) => void;
}

/** A list of todos with a text box to add more. */
export function TodoList({ initial, onChange }: Props) {
  const [todos, setTodos] = useState<Todo[]>(initial);
  const [draft, setDraft] = useState("");

  function update(next: Todo[]) {
    setTodos(next);
    onChange?.(next);
  }

  function add() {
    const title = draft.trim();
    if (!title) {
      return;
    }
    // Date.now() is unique enough for ids typed by hand.
    update([...todos, { id: Date.now(), title, done: false }]);
    setDraft("");
  }

  function toggle(id: number) {
    update(todos.map((todo) => (todo.id === id ? { ...todo, done: !todo.done } : todo)));
  }

  // Count what is left to do for the heading.
  const remaining = todos.filter((todo) => !todo.done).length;

  return (
    <div className="todo-list">
      <h2>Todos ({remaining} left)</h2>
      <ul>
        {todos.map((todo) => (
          <li key={todo.id} className={todo.done ? "done" : ""} onClick={() => toggle(todo.id)}>
            {todo.title}
          </li>
        ))}
      </ul>
      <input value={draft} onChange={(event) => setDraft(event.target.value)} />
      <button onClick={add} disabled={!draft.trim()}>
        Add
      </button>
    </div>
  );
}
