"""Create the database a DATABASE_URL names if it does not exist (MariaDB/MySQL: utf8mb4;
PostgreSQL: UTF8), for the drills' own databases (make chaos, chaos-mix). Usage:
python scripts/create_database.py mysql://root@127.0.0.1:3306/llmops_chaos"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llmops.env import Env  # noqa: E402


def create_database(url: str) -> None:
    os.environ["CREATE_DATABASE_URL"] = url
    config = Env().database("CREATE_DATABASE_URL", url, base_dir=Path("."))
    name = config["NAME"]
    if config["ENGINE"].endswith("mysql"):
        import MySQLdb

        server = MySQLdb.connect(
            host=config["HOST"],
            port=int(config["PORT"]),
            user=config["USER"],
            password=config["PASSWORD"] or "",
        )
        server.cursor().execute(f"CREATE DATABASE IF NOT EXISTS `{name}` CHARACTER SET utf8mb4")
        server.close()
    elif config["ENGINE"].endswith("postgresql"):
        import psycopg
        from psycopg import sql

        with psycopg.connect(
            host=config["HOST"],
            port=int(config["PORT"]),
            user=config["USER"],
            password=config["PASSWORD"] or None,
            dbname="postgres",
            autocommit=True,
        ) as server:
            if not server.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", [name]
            ).fetchone():
                server.execute(
                    sql.SQL("CREATE DATABASE {} ENCODING 'UTF8'").format(sql.Identifier(name))
                )


if __name__ == "__main__":
    create_database(sys.argv[1])
