import pytest

from servetune.arch.gpus import gpus
from servetune.cost.prices import PriceBook, catalog_rows, offers, parse_price_overrides
from servetune.errors import ConfigError


def test_every_offer_names_a_catalog_gpu_a_source_and_a_date():
    names = {g.name for g in gpus()}
    for o in offers():
        assert o.gpu in names, o
        assert o.source.startswith("http"), o
        assert o.read_on[:4].isdigit(), o
        assert 0 < o.usd_per_gpu_hour < 50, o
    kinds = {o.pricing for o in offers()}
    assert {"on-demand", "spot", "reserved-1y"} <= kinds


def test_cheapest_offer_by_default_and_aliases():
    book = PriceBook()
    p = book.price("a100")  # alias of A100-80GB
    assert p.gpu == "A100-80GB"
    cheapest = min(
        o.usd_per_gpu_hour for o in offers() if o.gpu == "A100-80GB" and o.pricing == "on-demand"
    )
    assert p.usd_per_gpu_hour == cheapest and p.source and p.read_on


def test_provider_and_pricing_filters():
    assert PriceBook(provider="aws").price("H100-SXM").provider == "aws"
    spot = PriceBook("spot").price("H100-SXM")
    assert spot.pricing == "spot"
    assert spot.usd_per_gpu_hour < PriceBook().price("H100-SXM").usd_per_gpu_hour


def test_override_wins():
    book = PriceBook(overrides=parse_price_overrides(["h100=9.5"]))
    p = book.price("H100-SXM")
    assert p.usd_per_gpu_hour == 9.5 and p.pricing == "override"


@pytest.mark.parametrize(
    "item,needle",
    [
        ("A100-80GB", "GPU=USD_PER_HOUR"),
        ("A100-80GB=cheap", "not a number"),
        ("A100-80GB=-1", "positive"),
        ("B9000=1.0", "unknown GPU"),
    ],
)
def test_bad_override_is_explained(item: str, needle: str):
    with pytest.raises(ConfigError) as exc:
        parse_price_overrides([item])
    assert needle in exc.value.message


def test_missing_price_says_what_the_catalog_has():
    with pytest.raises(ConfigError) as exc:
        PriceBook("reserved-3y").price("A100-80GB")
    assert "no reserved-3y price" in exc.value.message
    assert "on-demand" in (exc.value.hint or "") and "price A100-80GB=" in (exc.value.hint or "")
    assert "--price A100-80GB=" in (exc.value.shown(lambda f: "--" + f)[1] or "")  # the CLI's
    with pytest.raises(ConfigError, match="provider"):
        PriceBook(provider="nosuchcloud")
    with pytest.raises(ConfigError, match="pricing"):
        PriceBook("free")


def test_catalog_listing_is_ordered():
    rows = catalog_rows("spot")
    assert rows and all(o.pricing == "spot" for o in rows)
