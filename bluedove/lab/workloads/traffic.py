"""The `traffic` workload of docs/workloads.md: drivers' routes and sensor readings around real cities,
rush hours included."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from bluedove.core.space import Dimension, Space
from bluedove.lab.workloads import Workload

# (name, longitude, latitude, weight): a handful of real metropolitan areas; the weight is
# the share of drivers and of city sensor readings each gets.
CITIES: tuple[tuple[str, float, float, float], ...] = (
    ("Tokyo", 139.6917, 35.6895, 1.0),
    ("New York", -74.0060, 40.7128, 0.9),
    ("Sao Paulo", -46.6333, -23.5505, 0.8),
    ("Mumbai", 72.8777, 19.0760, 0.8),
    ("London", -0.1276, 51.5072, 0.7),
    ("Paris", 2.3522, 48.8566, 0.6),
    ("Lagos", 3.3792, 6.5244, 0.6),
    ("Sydney", 151.2093, -33.8688, 0.5),
)
HOUR = 3600.0
DAY = 86400.0
# Sensor readings: spread of a city's readings around its centre (degrees of latitude,
# about 17 km), and the share of readings from anywhere (highways, rural probes).
CITY_SIGMA_DEG = 0.15
BACKGROUND_SHARE = 0.05
# Rush hours: the share of readings stamped in each peak, its mean and spread (hours); the
# rest is uniform over the day. Readings inside a peak window are congested (slow).
MORNING = (0.30, 8.0, 0.8)
EVENING = (0.30, 17.5, 1.0)
RUSH_WINDOWS_H = ((7.0, 9.5), (16.0, 19.0))
# Speeds (km/h, mean and spread): free flow in town, congested in rush hour, highway anywhere.
FREE_FLOW = (55.0, 20.0)
CONGESTED = (22.0, 10.0)
HIGHWAY = (95.0, 25.0)
# Subscriptions: route centres around the city centre (degrees) and route half-sizes along
# and across the road; the mix of kinds a driver's subscriptions are drawn from.
ROUTE_SIGMA_DEG = 0.12
ROUTE_ALONG_DEG = (0.03, 0.09)
ROUTE_ACROSS_DEG = (0.004, 0.015)
KINDS = ("route", "slow", "commute", "commute_slow", "speeding")
KIND_P = (0.35, 0.25, 0.25, 0.10, 0.05)
SLOW_UNDER_KMH = (15.0, 25.0, 40.0)


def traffic_space() -> Space:
    """longitude [-180, 180), latitude [-90, 90), speed [0, 200) km/h, timestamp [0, 86400) s of the day."""
    return Space((
        Dimension("longitude", -180.0, 180.0),
        Dimension("latitude", -90.0, 90.0),
        Dimension("speed", 0.0, 200.0),
        Dimension("timestamp", 0.0, DAY),
    ))


def space_yaml(space: Space | None = None) -> str:
    """The space as the YAML text `--space FILE` reads (`dimensions: [{name, min, max}, ...]`)."""
    return yaml.safe_dump((space or traffic_space()).to_json(), sort_keys=False)


def write_space(path: str | Path, space: Space | None = None) -> Path:
    """Write the traffic space (or `space`) as a YAML file for `--space`; returns the path."""
    path = Path(path)
    path.write_text(space_yaml(space))
    return path


def city_weights() -> np.ndarray:
    w = np.array([c[3] for c in CITIES])
    return w / w.sum()


def in_rush_hour(timestamps: np.ndarray) -> np.ndarray:
    """True where a time of day (seconds) falls in a morning or evening peak window."""
    h = np.asarray(timestamps) / HOUR
    return np.logical_or.reduce([(lo <= h) & (h < hi) for lo, hi in RUSH_WINDOWS_H])


def _floor(x: np.ndarray, digits: int) -> np.ndarray:
    """Round down to `digits` decimals: short JSON, and never above a value that was < max."""
    f = 10.0 ** digits
    return np.floor(x * f) / f


def _normal(rng: np.random.Generator, mean_sd: tuple[float, float], n: int) -> np.ndarray:
    return rng.normal(mean_sd[0], mean_sd[1], n)


def _sample(n: int, rng: np.random.Generator) -> np.ndarray:
    """n sensor readings (longitude, latitude, speed, timestamp), every one inside the space."""
    lat_c = np.array([c[2] for c in CITIES])
    lon_c = np.array([c[1] for c in CITIES])
    city = rng.choice(len(CITIES), n, p=city_weights())
    lat = lat_c[city] + rng.normal(0.0, CITY_SIGMA_DEG, n)
    # A degree of longitude shrinks with cos(latitude): keep the city's spread round.
    lon = lon_c[city] + rng.normal(0.0, CITY_SIGMA_DEG, n) / np.cos(np.radians(lat_c[city]))
    anywhere = rng.random(n) < BACKGROUND_SHARE
    lon[anywhere] = rng.uniform(-180.0, 180.0, anywhere.sum())
    lat[anywhere] = rng.uniform(-90.0, 90.0, anywhere.sum())
    # Time of day: a morning peak, an evening peak, the rest spread over the day.
    which = rng.random(n)
    ts = rng.uniform(0.0, DAY, n)
    m = which < MORNING[0]
    e = (which >= MORNING[0]) & (which < MORNING[0] + EVENING[0])
    ts[m] = rng.normal(MORNING[1] * HOUR, MORNING[2] * HOUR, m.sum())
    ts[e] = rng.normal(EVENING[1] * HOUR, EVENING[2] * HOUR, e.sum())
    ts = np.mod(ts, DAY)
    speed = np.where(in_rush_hour(ts), _normal(rng, CONGESTED, n), _normal(rng, FREE_FLOW, n))
    speed[anywhere] = _normal(rng, HIGHWAY, anywhere.sum())
    pts = np.column_stack([
        np.clip(_floor(lon, 5), -180.0, 179.99999),
        np.clip(_floor(lat, 5), -90.0, 89.99999),
        np.clip(_floor(speed, 1), 0.0, 199.9),
        np.clip(np.floor(ts), 0.0, DAY - 1),
    ])
    return pts


def _subscriptions(rng: np.random.Generator, drivers: int,
                   per_driver: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each driver lives in one city; each of its subscriptions is one of KINDS."""
    space = traffic_space()
    n = drivers * per_driver
    lows = np.tile([d.min for d in space.dimensions], (n, 1))
    highs = np.tile([d.max for d in space.dimensions], (n, 1))
    queue_of = np.repeat(np.arange(drivers, dtype=np.int64), per_driver)
    home = rng.choice(len(CITIES), drivers, p=city_weights())[queue_of]
    kind = rng.choice(len(KINDS), n, p=KIND_P)
    # Route: a rectangle long along one axis, narrow across, near the city centre.
    lat_c = np.array([c[2] for c in CITIES])[home]
    lon_c = np.array([c[1] for c in CITIES])[home]
    cos = np.cos(np.radians(lat_c))
    c_lat = lat_c + rng.normal(0.0, ROUTE_SIGMA_DEG, n)
    c_lon = lon_c + rng.normal(0.0, ROUTE_SIGMA_DEG, n) / cos
    along = rng.uniform(*ROUTE_ALONG_DEG, n)
    across = rng.uniform(*ROUTE_ACROSS_DEG, n)
    east_west = rng.random(n) < 0.5
    h_lon = np.where(east_west, along, across) / cos
    h_lat = np.where(east_west, across, along)
    located = kind != KINDS.index("speeding")
    lows[located, 0] = np.round(c_lon - h_lon, 4)[located]
    highs[located, 0] = np.round(c_lon + h_lon, 4)[located]
    lows[located, 1] = np.round(c_lat - h_lat, 4)[located]
    highs[located, 1] = np.round(c_lat + h_lat, 4)[located]
    # Speed: "under X" on the slow kinds, "over X" (speed-trap alerts, anywhere) on speeding.
    slow = np.isin(kind, [KINDS.index("slow"), KINDS.index("commute_slow")])
    highs[slow, 2] = rng.choice(SLOW_UNDER_KMH, n)[slow]
    speeding = ~located
    lows[speeding, 2] = np.round(rng.uniform(120.0, 150.0, n), 0)[speeding]
    # Time of day: a commute window of 1-2 h starting in the morning or the evening.
    commute = np.isin(kind, [KINDS.index("commute"), KINDS.index("commute_slow")])
    morning = rng.random(n) < 0.5
    start = np.where(morning, rng.uniform(6.0, 8.5, n), rng.uniform(15.5, 18.0, n))
    length = rng.uniform(1.0, 2.0, n)
    lows[commute, 3] = np.round(start * HOUR, -1)[commute]
    highs[commute, 3] = np.round((start + length) * HOUR, -1)[commute]
    for i, d in enumerate(space.dimensions):  # clip to the space, as the API does
        lows[:, i] = np.clip(lows[:, i], d.min, d.max)
        highs[:, i] = np.clip(highs[:, i], d.min, d.max)
    return lows, highs, queue_of


def get(seed: int = 7, drivers: int = 300, subs_per_driver: int = 3) -> Workload:
    """The traffic workload: `drivers` queues of `subs_per_driver` subscriptions each; messages
    from `Workload.sample` (or `.messages(n, seed)`) are sensor readings."""
    if drivers < 1:
        raise ValueError(f"drivers: expected >= 1, got {drivers}")
    if subs_per_driver < 1:
        raise ValueError(f"subs_per_driver: expected >= 1, got {subs_per_driver}")
    rng = np.random.default_rng(seed)
    lows, highs, queue_of = _subscriptions(rng, drivers, subs_per_driver)
    return Workload(name=f"traffic(drivers={drivers},subs_per_driver={subs_per_driver})",
                    space=traffic_space(), lows=lows, highs=highs, queue_of=queue_of,
                    n_queues=drivers, sample=_sample)


def nearest_city(points: np.ndarray, max_deg: float = 1.5) -> list[str]:
    """The name of the city each reading is near (within `max_deg`), else "highway"."""
    lon_c = np.array([c[1] for c in CITIES])
    lat_c = np.array([c[2] for c in CITIES])
    d = np.hypot(points[:, 0:1] - lon_c, points[:, 1:2] - lat_c)
    best = np.argmin(d, axis=1)
    return [CITIES[j][0] if d[i, j] <= max_deg else "highway" for i, j in enumerate(best)]


if __name__ == "__main__":  # python -m bluedove.lab.workloads.traffic [FILE]: the space for --space
    import sys

    if len(sys.argv) > 1:
        print(write_space(sys.argv[1]))
    else:
        print(space_yaml(), end="")
