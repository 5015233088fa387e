"""Traffic shapes: closed-loop user counts over time and open-loop arrival schedules (pure)."""

from vprof.traffic.load import get_shape, load_shapes, shape_from_dict, shape_to_json
from vprof.traffic.shape import KINDS, PROCESSES, TrafficShape, arrival_offsets, partition

__all__ = [
    "KINDS",
    "PROCESSES",
    "TrafficShape",
    "arrival_offsets",
    "get_shape",
    "load_shapes",
    "partition",
    "shape_from_dict",
    "shape_to_json",
]
