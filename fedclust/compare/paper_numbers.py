"""Published figures drawn as reference lines on the dashboard, keyed by what a run's config names.

CCFC (Yan et al.) Table 1: NMI under its p-heterogeneity scheme (``data.partition: pshift``, 10 clients),
for the centralized baselines (one value, drawn flat) and the federated methods at p = 0, .25, .5, .75, 1.
"""

from __future__ import annotations

P = (0.0, 0.25, 0.5, 0.75, 1.0)
_TABLE1 = {  # data set -> method label -> NMI per p (centralized: one value)
    "mnist": {"KM": 0.5304, "FCM": 0.5187, "k-FED": (0.5081, 0.4879, 0.4515, 0.4552, 0.4142),
              "FFCM": (0.5157, 0.5264, 0.4693, 0.4855, 0.5372), "SDA-FC-KM": (0.5133, 0.5033, 0.5118, 0.5196, 0.5273),
              "SDA-FC-FCM": (0.5141, 0.5063, 0.5055, 0.5143, 0.5140),
              "PPFC-GAN": (0.6582, 0.6392, 0.6721, 0.7433, 0.8353), "CCFC": (0.9236, 0.8152, 0.6718, 0.3611, 0.0766)},
    "fmnist": {"KM": 0.6070, "FCM": 0.6026, "k-FED": (0.5932, 0.5730, 0.6143, 0.5237, 0.5452),
               "FFCM": (0.5786, 0.5995, 0.6173, 0.6139, 0.5855),
               "SDA-FC-KM": (0.5947, 0.6052, 0.6063, 0.6077, 0.6065),
               "SDA-FC-FCM": (0.6027, 0.5664, 0.6022, 0.5791, 0.6026),
               "PPFC-GAN": (0.6091, 0.5975, 0.5784, 0.6103, 0.6467), "CCFC": (0.6237, 0.5709, 0.6023, 0.4856, 0.1211)},
    "cifar10": {"KM": 0.0871, "FCM": 0.0823, "k-FED": (0.0820, 0.0866, 0.0885, 0.0818, 0.0881),
                "FFCM": (0.0812, 0.0832, 0.0870, 0.0842, 0.0832),
                "SDA-FC-KM": (0.0823, 0.0835, 0.0838, 0.0864, 0.0856),
                "SDA-FC-FCM": (0.0819, 0.0818, 0.0810, 0.0808, 0.0858),
                "PPFC-GAN": (0.1165, 0.1185, 0.1237, 0.1157, 0.1318), "CCFC": (0.2449, 0.2094, 0.2085, 0.1189, 0.0639)},
    "stl10": {"KM": 0.1532, "FCM": 0.1469, "k-FED": (0.1468, 0.1472, 0.1495, 0.1455, 0.1403),
              "FFCM": (0.1436, 0.1493, 0.1334, 0.1304, 0.1565), "SDA-FC-KM": (0.1470, 0.1511, 0.1498, 0.1441, 0.1477),
              "SDA-FC-FCM": (0.1406, 0.1435, 0.1424, 0.1425, 0.1447),
              "PPFC-GAN": (0.1318, 0.1501, 0.1432, 0.1590, 0.1629), "CCFC": (0.2952, 0.1727, 0.2125, 0.1610, 0.0711)},
}


def method_label(class_name: str, init_args: dict) -> str:
    """The column name a paper table uses for a configured method."""
    if class_name == "SDAFC":
        return "SDA-FC-FCM" if init_args.get("clusterer") == "fcm" else "SDA-FC-KM"
    return {"KMeans": "KM", "KFED": "k-FED", "PPFCGAN": "PPFC-GAN"}.get(class_name, class_name)


def reference(label: str, data_name: str, partition: str) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """(p values, NMI values) of CCFC Table 1 for this method and data set, or None."""
    if partition != "pshift":
        return None
    value = _TABLE1.get(data_name, {}).get(label)
    if value is None:
        return None
    return (P, value) if isinstance(value, tuple) else (P, (value,) * len(P))
