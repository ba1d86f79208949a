-- Mixed load for `make bench`: what a viewer does to one store, by weight.
-- The paths of each kind come from the file named by BENCH_PATHS (lines
-- "kind<TAB>path", written by bench/run.py for the server under test);
-- a kind with no path there (a route not available yet) is left out of the
-- draw, and the other weights keep their proportions.
local weights = {
  summary    = 5,   -- GET /v1/stores/{store}
  modlist    = 5,   -- GET /v1/stores/{store}/mod
  obs_json   = 25,  -- 100-row obs slice, three columns, JSON
  obs_csv    = 10,  -- the same as CSV
  obsmap     = 15,  -- obsmap lookup of 100 names
  zarr_1k    = 35,  -- 1 KiB zarr chunk keys (a viewer's tiles)
  zarr_4m    = 5,   -- 4 MiB zarr chunk keys
}

dofile(os.getenv("BENCH_LUA_DIR") .. "/report.lua")

local paths = {}
for line in io.lines(os.getenv("BENCH_PATHS")) do
  local kind, path = line:match("^(%S+)\t(.+)$")
  if kind and weights[kind] then
    paths[kind] = paths[kind] or {}
    table.insert(paths[kind], path)
  end
end

-- The draw: each available kind repeated by its weight.
local draw = {}
local kinds = {}
for kind, _ in pairs(weights) do table.insert(kinds, kind) end
table.sort(kinds)
for _, kind in ipairs(kinds) do
  if paths[kind] then
    for _ = 1, weights[kind] do table.insert(draw, kind) end
  end
end

local counter = 0
function setup(thread)
  counter = counter + 1
  thread:set("seed", counter)
end

-- Requests are formatted once per thread, then drawn.
local formatted = {}
function init(args)
  math.randomseed(seed or 1)
  for kind, list in pairs(paths) do
    formatted[kind] = {}
    for j, path in ipairs(list) do
      formatted[kind][j] = wrk.format("GET", path)
    end
  end
end

function request()
  local list = formatted[draw[math.random(#draw)]]
  return list[math.random(#list)]
end
