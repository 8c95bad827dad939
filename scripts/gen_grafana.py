"""Generate BlueDove's Grafana dashboard with grafana-foundation-sdk (the test extra).

    python scripts/gen_grafana.py          # writes the file below
    python scripts/gen_grafana.py --check  # exit 1 if it differs from what it would write

The dashboard is written once, into the chart, because a Helm chart reads only files inside its
own directory: deploy/helm/bluedove/dashboards/bluedove.json (templates/grafana-dashboards.yaml
makes a ConfigMap of it for Grafana's sidecar; to import it into Grafana by hand, upload that
file). Its panels follow the charts of the dashboard page; every query names metrics of
docs/metrics.md (tests/deploy/test_grafana.py checks both).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard, prometheus, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import LegendDisplayMode, LegendPlacement, SortOrder, TooltipDisplayMode
from grafana_foundation_sdk.models.dashboard import DashboardCursorSync, DataSourceRef, VariableRefresh, VariableSort

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "deploy" / "helm" / "bluedove" / "dashboards" / "bluedove.json"
DS = DataSourceRef(type_val="prometheus", uid="${datasource}")
RATE = "[$__rate_interval]"
# The spaces picked in the dashboard's `space` variable (all by default).
SPACE = 'space=~"$space"'
# A process's role, joined from its build info: legends say which kind of process a line is.
ROLE = "* on (job, instance) group_left (role) bluedove_build_info"

# (title, unit, description, [(PromQL, legend)]): one panel each, in the page's order.
PANELS = [
    ("Published and delivered", "reqps", "Messages accepted by the dispatchers, deliveries written by the matchers",
     [(f"sum(rate(bluedove_messages_published_total{RATE}))", "published/s"),
      (f"sum(rate(bluedove_matcher_deliveries_written_total{RATE}))", "delivered/s")]),
    ("Autoscaler input and thresholds", "none", "busy = Σλ/μ per matcher, the value the autoscaler acts on, "
     "against its scale-out and scale-in thresholds",
     [("max(bluedove_autoscaler_busy_ratio)", "busy (λ/μ per matcher)"),
      ("max(bluedove_autoscaler_scale_out_busy_ratio)", "scale out above"),
      ("max(bluedove_autoscaler_scale_in_busy_ratio)", "scale in below")]),
    ("Matchers: desired and actual", "none", "What the autoscaler's last decision wants, the owners that answered "
     "it, and the owners in the dispatchers' table",
     [("max(bluedove_autoscaler_desired_matchers)", "desired"),
      ("max(bluedove_autoscaler_actual_matchers)", "actual (answering)"),
      ("max(bluedove_cluster_matchers)", "in the table")]),
    ("Publish latency", "s", "Accepting a publish to every delivery stored, from the dispatchers' histogram",
     [(f"histogram_quantile(0.5, sum by (le) (rate(bluedove_publish_duration_seconds_bucket{RATE})))", "p50"),
      (f"histogram_quantile(0.99, sum by (le) (rate(bluedove_publish_duration_seconds_bucket{RATE})))", "p99")]),
    ("Queues", "short", "Messages queued in the matchers; deliveries handed out and not acked (handed out "
     "includes redeliveries)",
     [("sum(bluedove_matcher_queue_messages)", "matcher input queues"),
      ("sum(bluedove_deliveries_polled_total) - sum(bluedove_deliveries_acked_total)", "handed out, not acked"),
      (f"sum(rate(bluedove_deliveries_polled_total{RATE})) - sum(rate(bluedove_deliveries_acked_total{RATE}))",
       "handed out − acked, /s")]),
    ("λ and μ per matcher", "reqps", "Arrival rate λ and matching rate μ of each matcher, summed over its dimensions",
     [("sum by (instance) (bluedove_matcher_arrival_rate_per_second)", "λ {{instance}}"),
      ("sum by (instance) (bluedove_matcher_service_rate_per_second)", "μ {{instance}}")]),
    ("Congestion λ/μ per matcher", "none", "The busiest dimension queue of each matcher: above 1 sustained, it grows",
     [("max by (instance) (bluedove_matcher_congestion_ratio)", "{{instance}}")]),
    ("Matchers at their CPU limit", "percentunit", "Where a matcher runs under a CPU limit (a pod's, its cgroup's): "
     "its CPU over the stats window as a share of the limit, and the share of its CFS periods it was throttled in. "
     "The autoscaler reads a matcher throttled in over half its periods, or at 95 % of its limit, as saturated",
     [("max by (instance) (bluedove_matcher_cpu_limit_used_ratio)", "limit used {{instance}}"),
      ("max by (instance) (bluedove_matcher_cpu_throttled_ratio)", "throttled {{instance}}")]),
    ("Published per space", "reqps", "Messages accepted per second in each space picked (`space` is bounded: "
     "past BLUEDOVE_METRICS_SPACES named spaces a process sums the rest under _other)",
     [(f"sum by (space) (rate(bluedove_messages_published_total{{{SPACE}}}{RATE}))", "{{space}}")]),
    ("Publish latency p99 per space", "s", "Each picked space's publish p99, from the dispatchers' histogram",
     [(f"histogram_quantile(0.99, sum by (le, space) (rate(bluedove_publish_duration_seconds_bucket{{{SPACE}}}"
       f"{RATE})))", "{{space}}")]),
    ("Quota refusals per space", "reqps", "Requests a space's quota refused (429 quota_exceeded) per second, by the "
     "quota: a space pushing past its quota",
     [(f"sum by (space, quota) (rate(bluedove_quota_refused_total{{{SPACE}}}{RATE}))", "{{space}} {{quota}}")]),
    ("Matcher queues per space", "short", "Messages of each picked space waiting, being matched or stored, over "
     "all matchers",
     [(f"sum by (space) (bluedove_matcher_space_queue_messages{{{SPACE}}})", "{{space}}")]),
    ("CPU", "percentunit", "CPU of each process (100 % = one core)",
     [(f"rate(process_cpu_seconds_total{RATE}) {ROLE}", "{{role}} {{instance}}")]),
    ("Memory (RSS)", "bytes", "Resident memory of each process",
     [(f"process_resident_memory_bytes {ROLE}", "{{role}} {{instance}}")]),
]


def build() -> dict:
    d = (dashboard.Dashboard("BlueDove")
         .uid("bluedove")
         .description("An elastic pub/sub cluster: load, autoscaling, latency, queues, matchers (docs/metrics.md)")
         .tags(["bluedove"])
         .refresh("10s")
         .time("now-1h", "now")
         .tooltip(DashboardCursorSync.CROSSHAIR)
         .with_variable(dashboard.DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
         .with_variable(dashboard.QueryVariable("space").label("Space").datasource(DS)
                        .query("label_values(bluedove_messages_published_total, space)")
                        .multi(True).include_all(True).all_value(".*").refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
                        .sort(VariableSort.ALPHABETICAL_ASC))
         .annotation(dashboard.AnnotationQuery()
                     .name("Cluster events")
                     .datasource(DS)
                     .enable(True)
                     .icon_color("orange")
                     .expr(f"sum by (action) (increase(bluedove_cluster_events_total{RATE})) > 0")))
    for i, (title, unit, description, queries) in enumerate(PANELS):
        panel = (timeseries.Panel().title(title).description(description).unit(unit).datasource(DS)
                 .height(8).span(12)
                 .legend(cb.VizLegendOptions().display_mode(LegendDisplayMode.LIST)
                         .placement(LegendPlacement.BOTTOM).show_legend(True))
                 .tooltip(cb.VizTooltipOptions().mode(TooltipDisplayMode.MULTI).sort(SortOrder.DESCENDING)))
        for j, (expr, legend) in enumerate(queries):
            panel = panel.with_target(prometheus.Dataquery().expr(expr).legend_format(legend).ref_id("ABCDEFGH"[j]))
        d = d.with_panel(panel)
    return json.loads(json.dumps(d.build(), cls=JSONEncoder))


def text() -> str:
    return json.dumps(build(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 if the written file differs from the generated one")
    args = p.parse_args()
    out = text()
    if args.check:
        if not OUTPUT.exists() or OUTPUT.read_text(encoding="utf-8") != out:
            print(f"{OUTPUT.relative_to(ROOT)} is not what scripts/gen_grafana.py generates", file=sys.stderr)
            return 1
        return 0
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(out, encoding="utf-8")
    print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
