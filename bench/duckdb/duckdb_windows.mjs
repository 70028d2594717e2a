// The second peer: the same window statistics as `headroom analyze --scope gpu` and
// bench/pandas_windows.py, in DuckDB's SQL (@duckdb/node-api), by the definitions of
// docs/METRICS.md:
//   dt                  median of all consecutive timestamp differences, pooled over GPUs
//   window index        k = floor((t - t0_gpu) / W + 1e-9), t0_gpu = the GPU's first time
//   window power        mean of the window's samples
//   counted             t0_gpu + (k + 1) W <= last_gpu + dt
//   violation_fraction  counted windows with power > budget / counted windows
//   max_window_power_w  largest counted window power
// Prints one JSON object shaped like headroom's and pandas_windows.py's.
//
// Usage: node duckdb_windows.mjs TRACE.csv BUDGET_W [WINDOW_S ...]   (env DUCKDB_THREADS, 1)
import { DuckDBInstance } from '@duckdb/node-api';

const [path, budgetArg, ...windowArgs] = process.argv.slice(2);
const budgetW = Number(budgetArg);
const windowsS = windowArgs.length ? windowArgs.map(Number) : [0.5, 30, 300];
const quote = (s) => `'${String(s).replaceAll("'", "''")}'`;

const instance = await DuckDBInstance.create(':memory:', {
  threads: process.env.DUCKDB_THREADS || '1',
});
const con = await instance.connect();
// The file's rows in file order (rn), each GPU's first and last time, and the pooled median step.
await con.run(`
  CREATE TEMP TABLE s AS
  SELECT row_number() OVER () AS rn, t_s, gpu, power_w
  FROM read_csv(${quote(path)}, header = true, auto_detect = false,
                columns = {'t_s': 'DOUBLE', 'gpu': 'BIGINT', 'power_w': 'DOUBLE'})`);
await con.run(`
  CREATE TEMP TABLE g AS
  SELECT gpu, arg_min(t_s, rn) AS t0, arg_max(t_s, rn) AS last FROM s GROUP BY gpu`);
const dtRows = (await con.runAndReadAll(`
  SELECT median(d) AS dt FROM (
    SELECT t_s - lag(t_s) OVER (PARTITION BY gpu ORDER BY rn) AS d FROM s) WHERE d IS NOT NULL`))
  .getRowObjects();
const dtS = Number(dtRows[0].dt);
const out = { dt_s: dtS, windows: [] };
for (const w of windowsS) {
  const rows = (await con.runAndReadAll(`
    WITH win AS (
      SELECT s.gpu, floor((s.t_s - g.t0) / ${w} + 1e-9)::BIGINT AS k, avg(s.power_w) AS p,
             any_value(g.t0) AS t0, any_value(g.last) AS last
      FROM s JOIN g USING (gpu) GROUP BY s.gpu, k)
    SELECT count(*) AS n, avg(CASE WHEN p > ${budgetW} THEN 1.0 ELSE 0.0 END) AS frac,
           max(p) AS pmax
    FROM win WHERE t0 + (k + 1) * ${w} <= last + ${dtS}`)).getRowObjects();
  const r = rows[0];
  const n = Number(r.n);
  out.windows.push({
    window_s: w,
    windows_counted: n,
    violation_fraction: n ? Number(r.frac) : null,
    max_window_power_w: n ? Number(r.pmax) : null,
  });
}
console.log(JSON.stringify(out, null, 2));
