"""What CloudWatch Logs does on Lambda with the Embedded Metric Format lines a
function prints, done here with PutMetricData: the local worker prints the
same lines with `--emf`, and the local stack has no log pipeline to turn
them into metrics.

Specification of the format:
https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html
"""

import datetime
import json
import os
from pathlib import Path

import boto3


def lines(log: Path) -> list[dict]:
    """The EMF objects among a process's output lines."""
    found = []
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.startswith("{"):
            continue
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and "_aws" in value:
            found.append(value)
    return found


def total(objects: list[dict], metric: str) -> int:
    """The sum of `metric` over the EMF objects (a scalar or a list each)."""
    n = 0
    for o in objects:
        v = o.get(metric)
        if isinstance(v, list):
            n += sum(v)
        elif isinstance(v, (int, float)):
            n += v
    return int(n)


def publish(objects: list[dict]) -> int:
    """PutMetricData for every metric of every object, with its dimensions,
    unit and timestamp, as CloudWatch would extract them. Returns how many
    metric data entries were put."""
    cloudwatch = boto3.client("cloudwatch", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    put = 0
    for o in objects:
        meta = o["_aws"]
        at = datetime.datetime.fromtimestamp(meta["Timestamp"] / 1000, tz=datetime.timezone.utc)
        for directive in meta["CloudWatchMetrics"]:
            data = []
            for dims in directive["Dimensions"]:
                dimensions = [{"Name": d, "Value": str(o[d])} for d in dims]
                for m in directive["Metrics"]:
                    v = o.get(m["Name"])
                    values = v if isinstance(v, list) else [v]
                    values = [float(x) for x in values if isinstance(x, (int, float))]
                    if not values:
                        continue
                    data.append({
                        "MetricName": m["Name"],
                        "Dimensions": dimensions,
                        "Timestamp": at,
                        "Values": values,
                        "Unit": m.get("Unit", "None"),
                    })
            # PutMetricData takes at most 1,000 entries a call.
            for start in range(0, len(data), 1000):
                cloudwatch.put_metric_data(Namespace=directive["Namespace"], MetricData=data[start:start + 1000])
                put += len(data[start:start + 1000])
    return put
