"""`python -m connectors.spark export --snapshot DIR | --bootstrap-servers B --changelog TOPIC
--to PATH --format parquet|delta|csv`: see connectors.spark.export. Shows a progress bar on a
terminal and prints a summary (rows, bytes, seconds) at the end."""

from __future__ import annotations

import argparse
import sys
from typing import Optional

from eddy.errors import EddyError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m connectors.spark")
    commands = parser.add_subparsers(dest="command", required=True)
    export = commands.add_parser("export", help="export a store snapshot or a changelog")
    source = export.add_mutually_exclusive_group(required=True)
    source.add_argument("--snapshot", metavar="DIR", help="a snapshot directory (App.snapshot)")
    source.add_argument("--changelog", metavar="TOPIC", help="a changelog (or any) topic; needs --bootstrap-servers")
    export.add_argument("--bootstrap-servers", metavar="B", help="host:port of Kafka, or local:///dir")
    export.add_argument("--key-serde", default="BYTES", help="changelog key serde (STRING, INT64, ...)")
    export.add_argument("--value-serde", default="BYTES", help="changelog value serde")
    export.add_argument("--latest-per-key", action="store_true", help="the changelog's table: latest value per key")
    export.add_argument("--to", required=True, metavar="PATH", help="output directory")
    export.add_argument("--format", default="parquet", choices=("parquet", "delta", "csv"))
    export.add_argument("--engine", default="auto", choices=("auto", "spark", "pyarrow"))
    export.add_argument("--raw", action="store_true", help="keys and values as bytes")
    export.add_argument("--overwrite", action="store_true", help="replace an existing output")
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    args = _parser().parse_args(argv)
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from connectors.spark import export

    console = Console(stderr=True)
    columns = (TextColumn("[progress.description]{task.description}"), BarColumn(),
               TextColumn("{task.completed:,} rows"), TimeElapsedColumn())
    try:
        with Progress(*columns, console=console, disable=not console.is_terminal, transient=True) as bar:
            task = bar.add_task("exporting", total=None)

            def advance(rows: int) -> None:
                bar.advance(task, rows)

            if args.snapshot:
                summary = export.export_snapshot(args.snapshot, args.to, args.format, engine=args.engine,
                                                 raw=args.raw, overwrite=args.overwrite, progress=advance)
            else:
                if not args.bootstrap_servers:
                    console.print("error: --changelog needs --bootstrap-servers")
                    return 2
                summary = export.export_changelog(
                    args.bootstrap_servers, args.changelog, args.to, args.format, engine=args.engine,
                    key_serde=args.key_serde, value_serde=args.value_serde, latest_per_key=args.latest_per_key,
                    overwrite=args.overwrite, progress=advance)
    except EddyError as exc:
        console.print(f"error: {type(exc).__name__}: {exc}")
        return 1
    print(summary.describe())
    return 0


if __name__ == "__main__":
    sys.exit(main())
