"""``alfworld_games``: the game catalog as a warehouse table."""


import dagster as dg

from assets.failures import one_line_failures
from assets.lineage import ASSET_CODE_VERSION
from evoharness.reporting.charts import markdown_table
from pipelines.resources import AlfworldResource, WarehouseResource


@dg.asset(group_name="collection", code_version=ASSET_CODE_VERSION, kinds={"python", "duckdb"},
          description="Every ALFWorld game of the data folder, with split and task type.")
@one_line_failures
def alfworld_games(
    context: dg.AssetExecutionContext, alfworld: AlfworldResource, warehouse: WarehouseResource
) -> dg.MaterializeResult:
    games = alfworld.catalog().all_games()
    with warehouse.open() as wh:
        total = wh.upsert_games(game.as_row() for game in games)
        columns, rows = wh.query("games_by_split")
    context.log.info("catalog: %d games found, %d in the warehouse", len(games), total)
    return dg.MaterializeResult(
        metadata={
            "games": dg.MetadataValue.int(total),
            "by_split_and_task_type": dg.MetadataValue.md(markdown_table(columns, rows)),
        }
    )
