"""Invoice totals and the text summary printed on the PDF's last page."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from models import Invoice, InvoiceStatus, LineItem
from tax import apply_discount, line_tax, reverse_charge_applies, round_money, vat_rate_for

SELLER_COUNTRY = "DE"


@dataclass(frozen=True)
class InvoiceTotals:
    net: Decimal
    discounted_net: Decimal
    tax: Decimal
    gross: Decimal
    reverse_charge: bool


def compute_totals(invoice: Invoice) -> InvoiceTotals:
    net = invoice.subtotal()
    discounted = apply_discount(net, invoice.discount_percent)
    reverse = reverse_charge_applies(invoice.customer, SELLER_COUNTRY)
    tax = Decimal("0")
    for item in invoice.items:
        tax += line_tax(item, invoice.customer, SELLER_COUNTRY)
    if net:
        tax = round_money(tax * discounted / net)
    return InvoiceTotals(net, discounted, tax, discounted + tax, reverse)


def tax_breakdown(invoice: Invoice) -> dict[str, Decimal]:
    """Net amount per VAT rate, as the law wants it printed."""
    by_rate: dict[str, Decimal] = {}
    for item in invoice.items:
        rate = vat_rate_for(invoice.customer.country_code, item.tax_category)
        key = f"{rate * 100:.1f}%"
        by_rate[key] = by_rate.get(key, Decimal("0")) + item.net_amount()
    return {key: round_money(amount) for key, amount in sorted(by_rate.items())}


def describe_item(item: LineItem, currency_code: str) -> str:
    total = round_money(item.net_amount())
    return f"{item.quantity} x {item.description} ({item.sku}) @ {item.unit_price} = {total} {currency_code}"


def summary_lines(invoice: Invoice) -> list[str]:
    totals = compute_totals(invoice)
    currency = invoice.currency.value
    lines = [f"Invoice {invoice.number} for {invoice.customer.display_name}"]
    lines += [describe_item(item, currency) for item in invoice.items]
    lines.append(f"Net: {totals.net} {currency}")
    if invoice.discount_percent:
        lines.append(f"After {invoice.discount_percent}% discount: {totals.discounted_net} {currency}")
    if totals.reverse_charge:
        lines.append(f"VAT reverse charge, customer VAT number {invoice.customer.vat_number}")
    else:
        for rate, amount in tax_breakdown(invoice).items():
            lines.append(f"  net at {rate}: {amount} {currency}")
        lines.append(f"VAT: {totals.tax} {currency}")
    lines.append(f"Total: {totals.gross} {currency}")
    return lines


def mark_sent(invoice: Invoice) -> None:
    if not invoice.items:
        raise ValueError(f"invoice {invoice.number} has no items")
    invoice.status = InvoiceStatus.SENT
