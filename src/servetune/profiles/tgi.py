"""Hugging Face TGI (``text-generation-launcher``).

Sources: ``text-generation-launcher --help`` (v3: ``--model-id``, ``--hostname``, ``--port``;
it serves the model under the id it was given); metric names: docs/source/reference/metrics.md
(metrics-exporter-prometheus, no ``_total`` suffixes; ``*_duration`` histograms in seconds).
"""

from __future__ import annotations

from servetune.profiles import concepts as ss
from servetune.profiles.metric_map import EngineMap, names
from servetune.profiles.model import EngineProfile, Entry, Launch, Metrics

TGI = EngineMap(
    engine="tgi",
    name="tgi",
    version="",
    prefix="tgi_",
    values={
        ss.RUNNING: names("tgi_batch_current_size"),
        ss.WAITING: names("tgi_queue_size"),
        # TGI has no token counters, but its per-request length histograms' sums are exactly
        # cumulative token totals.
        ss.PROMPT_TOKENS_TOTAL: names("tgi_request_input_length_sum"),
        ss.GENERATION_TOKENS_TOTAL: names("tgi_request_generated_tokens_sum"),
        ss.REQUESTS_FINISHED_TOTAL: names("tgi_request_success"),
    },
    histograms={
        ss.TPOT_SECONDS: names("tgi_request_mean_time_per_token_duration"),
        ss.E2E_SECONDS: names("tgi_request_duration"),
        ss.QUEUE_SECONDS: names("tgi_request_queue_duration"),
    },
)


PROFILE = EngineProfile(
    id="tgi",
    display_name="TGI",
    summary="Hugging Face TGI (`text-generation-launcher --model-id MODEL`)",
    entry=Entry(
        command=("text-generation-launcher",),
        model_flag="--model-id",
        programs=("text-generation-launcher",),
        flag_form="exact",
    ),
    launch=Launch(host_flag="--hostname", name_flag=None, served_name="given"),
    metrics=Metrics(maps=(TGI,)),
    sim_screens=frozenset({"memory"}),
    diagnose_flags=True,
)
