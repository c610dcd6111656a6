"""The formats of single files that hold TensorFlow graphs (RunMetadata, GraphDef binary and text), and reading
one such file: what a run directory's ``graphs/`` and ``run_metadata/`` hold, and the registry's last entries."""

from __future__ import annotations

import os

from rnnprof.traces import graphdef, messages, run_metadata
from rnnprof.traces.formats import Format, GraphDefs, first_match, probe

GRAPH_FILES: tuple[Format, ...] = (
    Format("run-metadata", messages.RUN_METADATA, run_metadata.sniff, run_metadata.parse,
           run_metadata.events, run_metadata.graph_defs),
    Format("run-metadata-graphs", messages.RUN_METADATA_GRAPHS, run_metadata.sniff_graphs_only,
           run_metadata.parse, graphs=run_metadata.graph_defs),
    Format("graphdef", messages.GRAPHDEF, graphdef.sniff, graphdef.parse, graphs=graphdef.graph_defs),
    Format("graphdef-text", messages.GRAPHDEF_TEXT, graphdef.sniff_text, graphdef.parse_text,
           graphs=graphdef.graph_defs),
)


def read_graph_file(path: str | os.PathLike) -> GraphDefs:
    """The graphs of one GraphDef or RunMetadata file, its format recognised from its first bytes."""
    target = probe(path)
    fmt = first_match(target, GRAPH_FILES, "graphs")
    return fmt.graphs(target.path, fmt.parse(target.path))
