"""Invoice data: customers, line items and the invoices that group them."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from enum import Enum


class Currency(Enum):
    EUR = "EUR"
    USD = "USD"
    GBP = "GBP"


class InvoiceStatus(Enum):
    DRAFT = "draft"
    SENT = "sent"
    PAID = "paid"
    VOID = "void"


@dataclass(frozen=True)
class Customer:
    customer_id: str
    display_name: str
    country_code: str
    vat_number: str | None = None
    is_business: bool = False


@dataclass(frozen=True)
class LineItem:
    sku: str
    description: str
    quantity: int
    unit_price: Decimal
    tax_category: str = "standard"

    def net_amount(self) -> Decimal:
        return self.unit_price * self.quantity


@dataclass
class Invoice:
    number: str
    customer: Customer
    issued_on: date
    currency: Currency = Currency.EUR
    items: list[LineItem] = field(default_factory=list)
    status: InvoiceStatus = InvoiceStatus.DRAFT
    discount_percent: Decimal = Decimal("0")

    def add_item(self, item: LineItem) -> None:
        if self.status is not InvoiceStatus.DRAFT:
            raise InvoiceLockedError(self.number, self.status)
        self.items.append(item)

    def subtotal(self) -> Decimal:
        return sum((item.net_amount() for item in self.items), Decimal("0"))


class InvoiceLockedError(Exception):
    def __init__(self, number: str, status: InvoiceStatus) -> None:
        super().__init__(f"invoice {number} is {status.value} and can no longer be edited")
        self.number = number
        self.status = status
