"""A customer's open invoices and what they owe, across currencies."""

from __future__ import annotations

from collections import defaultdict
from datetime import date, timedelta
from decimal import Decimal

from models import Currency, Customer, Invoice, InvoiceStatus
from totals import compute_totals

PAYMENT_TERMS = timedelta(days=30)


class CustomerLedger:
    def __init__(self, customer: Customer) -> None:
        self.customer = customer
        self.invoices: list[Invoice] = []

    def record(self, invoice: Invoice) -> None:
        if invoice.customer.customer_id != self.customer.customer_id:
            raise ValueError(f"invoice {invoice.number} belongs to {invoice.customer.display_name}")
        self.invoices.append(invoice)

    def open_invoices(self) -> list[Invoice]:
        return [inv for inv in self.invoices if inv.status is InvoiceStatus.SENT]

    def overdue(self, today: date) -> list[Invoice]:
        return [inv for inv in self.open_invoices() if inv.issued_on + PAYMENT_TERMS < today]

    def balance_by_currency(self) -> dict[Currency, Decimal]:
        owed: dict[Currency, Decimal] = defaultdict(Decimal)
        for invoice in self.open_invoices():
            owed[invoice.currency] += compute_totals(invoice).gross
        return dict(owed)

    def mark_paid(self, number: str) -> Invoice:
        for invoice in self.invoices:
            if invoice.number == number:
                if invoice.status is not InvoiceStatus.SENT:
                    raise ValueError(f"invoice {number} is {invoice.status.value}, not sent")
                invoice.status = InvoiceStatus.PAID
                return invoice
        raise KeyError(number)

    def reminder_text(self, today: date) -> str | None:
        late = self.overdue(today)
        if not late:
            return None
        numbers = ", ".join(inv.number for inv in late)
        total = sum((compute_totals(inv).gross for inv in late), Decimal("0"))
        return f"Dear {self.customer.display_name}, invoices {numbers} ({total}) are past due."
