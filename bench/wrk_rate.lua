-- wrk at a fixed offered rate: each connection waits WRK_DELAY_MS between its requests, so
-- -c C connections offer about C x 1000 / WRK_DELAY_MS requests per second (wrk's latency
-- excludes the wait). Used by bench/agent_overhead.py.
local delay_ms = tonumber(os.getenv("WRK_DELAY_MS") or "10")
function delay()
  return delay_ms
end
