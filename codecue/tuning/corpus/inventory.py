"""A small inventory of items with prices, quantities and simple reports."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Item:
    """One stock-keeping unit."""

    name: str
    price: float
    quantity: int = 0
    tags: list[str] = field(default_factory=list)

    def total_value(self) -> float:
        """Price times quantity."""
        return self.price * self.quantity

    def is_low(self, threshold: int = 5) -> bool:
        return self.quantity < threshold


class Inventory:
    def __init__(self) -> None:
        self.items: dict[str, Item] = {}

    def add(self, item: Item) -> None:
        if item.name in self.items:
            raise ValueError(f"duplicate item: {item.name}")
        self.items[item.name] = item

    def remove(self, name: str) -> Item:
        try:
            return self.items.pop(name)
        except KeyError:
            raise KeyError(f"no such item: {name}") from None

    # Restocking never lowers a quantity; use remove() to take items out.
    def restock(self, name: str, amount: int) -> None:
        if amount <= 0:
            raise ValueError("amount must be positive")
        self.items[name].quantity += amount

    def low_stock(self, threshold: int = 5) -> list[Item]:
        return sorted(
            (item for item in self.items.values() if item.is_low(threshold)),
            key=lambda item: item.quantity,
        )

    def total_value(self) -> float:
        # Floating point sums are fine here: prices have at most two decimals.
        return sum(item.total_value() for item in self.items.values())

    def by_tag(self, tag: str) -> list[Item]:
        return [item for item in self.items.values() if tag in item.tags]

    def save(self, path: Path) -> None:
        data = [
            {"name": i.name, "price": i.price, "quantity": i.quantity, "tags": i.tags}
            for i in self.items.values()
        ]
        path.write_text(json.dumps(data, indent=2), encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> Inventory:
        inventory = cls()
        for entry in json.loads(path.read_text(encoding="utf-8")):
            inventory.add(Item(**entry))
        return inventory


def report(inventory: Inventory) -> str:
    lines = [f"{'name':<20} {'qty':>5} {'value':>10}"]
    for item in sorted(inventory.items.values(), key=lambda i: i.name):
        lines.append(f"{item.name:<20} {item.quantity:>5} {item.total_value():>10.2f}")
    lines.append(f"{'total':<20} {'':>5} {inventory.total_value():>10.2f}")
    return "\n".join(lines)


if __name__ == "__main__":
    # A small demo stock, printed as a report.
    stock = Inventory()
    stock.add(Item("apple", 0.5, 120, ["fruit"]))
    stock.add(Item("pear", 0.75, 3, ["fruit"]))
    stock.add(Item("hammer", 12.0, 7, ["tools"]))
    print(report(stock))
    for item in stock.low_stock():
        print(f"reorder {item.name}")
