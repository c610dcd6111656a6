"""The options and the wiring shared by the commands that analyse a whole job's rank files."""

from __future__ import annotations

import argparse

from rnnprof.commands.flags import positive_int
from rnnprof.errors import UsageError
from rnnprof.reports.progress import RankProgress
from rnnprof.traces.rank_folder import job_of, run_dir_ranks


def add_arguments(parser: argparse.ArgumentParser) -> None:
    job = parser.add_argument_group("a whole job (a folder of rank files, or several Kineto files)")
    job.add_argument("--jobs", type=positive_int, default=None, metavar="N",
                     help="analyse N ranks at a time in worker processes (default: the cores; none for rank files of "
                          "less than 4 MB in all)")
    job.add_argument("--scheduler", default=None, metavar="ADDRESS",
                     help="analyse the ranks on an existing Dask distributed cluster, e.g. tcp://host:8786 "
                          "(its workers need rnnprof and the files at the same paths; extra rnnprof[dask])")


def rank_job(paths):
    """The job's rank files when ``paths`` are a job's (``rank_folder.job_of``), else None."""

    return job_of(paths)


def ranks_of(paths):
    """``(rank files, manifest)`` of a job's: its rank files (``rank_job``; no manifest), or the rank traces of a
    PyTorch run directory with its manifest (``rank_folder.run_dir_ranks``); None for other input."""

    job = job_of(paths)
    return (job, None) if job is not None else run_dir_ranks(paths)


def run_job(function, folder, args, **kwargs):
    """``function(folder, ..., jobs=, scheduler=, on_done=)`` under a progress bar counting ranks."""

    with RankProgress(len(folder.files)) as progress:
        return function(folder, jobs=args.jobs, scheduler=args.scheduler, on_done=progress.on_done, **kwargs)


def refuse_job_options(args, instead: str = "") -> None:
    """``--jobs``/``--scheduler`` given for input that is not a job's rank files (or, with ``instead``, for
    a job read in one process: ``--align`` other than none merges the ranks before analysing them)."""

    given = [flag for flag, value in (("--jobs", args.jobs), ("--scheduler", args.scheduler)) if value]
    if not given:
        return
    verb = "apply" if len(given) > 1 else "applies"
    if instead:
        raise UsageError(f"{' and '.join(given)} {verb} with --align none; {instead} reads the ranks in one "
                         f"process to put them on one clock")
    raise UsageError(f"{' and '.join(given)} {verb} to a job's rank files (a folder of Kineto traces or several "
                     f"Kineto files), not to {', '.join(map(str, args.paths))}")
