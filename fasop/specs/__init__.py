"""Files -> frozen values: cluster and model specs (`load`, `types`), strict YAML (`reader`), finding
and bounded reading of files (`files`), FASOP profiles (`profiles`), the GPU catalog and the
analytic estimator's constants (`catalog`), HuggingFace config.json files (`hf_config`, with
`architecture`), and cloud prices (`prices`). The shipped specs are package data under
fasop/data/ (`files.shipped_folder`). The only layer that reads YAML or JSON spec files.

May import: fasop.core.
"""

from fasop.specs.files import shipped_specs
from fasop.specs.load import load_cluster, load_model
from fasop.specs.types import GIB, TRANSFORMER_KINDS, ClusterSpec, ModelSpec, NodeType

__all__ = ["GIB", "TRANSFORMER_KINDS", "ClusterSpec", "ModelSpec", "NodeType", "load_cluster", "load_model",
           "shipped_specs"]
