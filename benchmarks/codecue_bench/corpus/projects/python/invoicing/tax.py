"""VAT rules per country and tax category, and rounding of money amounts."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

from models import Customer, LineItem

CENT = Decimal("0.01")

VAT_RATES: dict[str, dict[str, Decimal]] = {
    "DE": {"standard": Decimal("0.19"), "reduced": Decimal("0.07"), "exempt": Decimal("0")},
    "FR": {"standard": Decimal("0.20"), "reduced": Decimal("0.055"), "exempt": Decimal("0")},
    "NL": {"standard": Decimal("0.21"), "reduced": Decimal("0.09"), "exempt": Decimal("0")},
}


class UnknownTaxRegionError(KeyError):
    pass


def round_money(amount: Decimal) -> Decimal:
    return amount.quantize(CENT, rounding=ROUND_HALF_UP)


def vat_rate_for(country_code: str, tax_category: str) -> Decimal:
    try:
        rates = VAT_RATES[country_code]
    except KeyError:
        raise UnknownTaxRegionError(country_code) from None
    return rates.get(tax_category, rates["standard"])


def reverse_charge_applies(customer: Customer, seller_country: str) -> bool:
    """B2B sales inside the EU to another country: the customer pays the VAT."""
    return customer.is_business and bool(customer.vat_number) and customer.country_code != seller_country


def line_tax(item: LineItem, customer: Customer, seller_country: str) -> Decimal:
    if reverse_charge_applies(customer, seller_country):
        return Decimal("0")
    rate = vat_rate_for(customer.country_code, item.tax_category)
    return round_money(item.net_amount() * rate)


def apply_discount(amount: Decimal, discount_percent: Decimal) -> Decimal:
    if discount_percent < 0 or discount_percent > 100:
        raise ValueError(f"discount must be between 0 and 100, got {discount_percent}")
    return round_money(amount * (Decimal("100") - discount_percent) / Decimal("100"))
