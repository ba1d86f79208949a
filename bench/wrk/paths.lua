-- One endpoint over many paths for `make bench` (bench/run.py, the trees and
-- matrices sections): the file named by BENCH_PATHS holds one path per line.
--   BENCH_ORDER=random (default)  each request draws a path at random
--                                 (seeded per wrk thread, so runs repeat)
--   BENCH_ORDER=cycle             the paths in file order, over and over:
--                                 a group of k lines is one logical request
--                                 that a reference needs k requests for
--   BENCH_AUTHORIZATION=VALUE      sent as the Authorization header of every
--                                 request (the deploy section's bearer token)
dofile(os.getenv("BENCH_LUA_DIR") .. "/report.lua")

local paths = {}
for line in io.lines(os.getenv("BENCH_PATHS")) do
  if line ~= "" then table.insert(paths, line) end
end
local cycle = os.getenv("BENCH_ORDER") == "cycle"
local authorization = os.getenv("BENCH_AUTHORIZATION")
local headers = authorization and { Authorization = authorization } or nil

local counter = 0
function setup(thread)
  counter = counter + 1
  thread:set("seed", counter)
end

local formatted = {}
local next_i = 0
function init(args)
  math.randomseed(seed or 1)
  for i, path in ipairs(paths) do
    formatted[i] = wrk.format("GET", path, headers)
  end
end

function request()
  if cycle then
    next_i = next_i % #formatted + 1
    return formatted[next_i]
  end
  return formatted[math.random(#formatted)]
end
