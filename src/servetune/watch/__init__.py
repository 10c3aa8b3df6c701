"""Watch: a running server's own metrics, live — and the same figures and rules as files for
Grafana and Prometheus.

``session`` (scrape ``/metrics``, keep a sliding window, evaluate diagnose's rules over it,
track findings as they start and stop, record), ``screen`` (the terminal view), ``panels``
(the figures as PromQL per engine map), ``grafana`` (a dashboard) and ``alerts`` (Prometheus
alerting rules from diagnose's rule table).
"""
