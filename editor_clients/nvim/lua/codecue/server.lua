--- The LSP client for `codecue serve --stdio`: start and attach it, notice when the server dies, say so
--- once, and start it again (with backoff, then on the next edit) until it is back.
local api = vim.api
local compat = require('codecue.compat')
local config = require('codecue.config')

local M = {
  name = 'codecue',
  ---@type integer|nil
  client_id = nil,
  ---@type 'stopped'|'starting'|'running'|'down'|'disabled'
  state = 'stopped',
  ---@type string|nil one line: why the server is down
  last_error = nil,
  failures = 0,
  ---@type uv.uv_timer_t|nil
  retry_timer = nil,
  ---@type integer|nil pid of the server process
  pid = nil,
  --- Set by init.lua: engine callbacks.
  on_attach = function(_, _) end,
  on_partial = function(_) end,
}

local stopping = {} ---@type table<integer, boolean> client ids we stopped on purpose
local log_offset = 0

local function notify(message, level)
  vim.notify('CodeCue: ' .. message, level or vim.log.levels.INFO, { title = 'CodeCue' })
end

--- The last line the server wrote to stderr since it started, from the LSP log, if any. Neovim logs a
--- server's stderr there; it is where "model not found" and similar reasons end up.
---@return string|nil
---@param since integer where in the log this server's lines start
local function last_stderr_line(since)
  local ok, path = pcall(vim.lsp.log.get_filename)
  if not ok or not path then
    return nil
  end
  local fd = vim.uv.fs_open(path, 'r', 420)
  if not fd then
    return nil
  end
  local stat = vim.uv.fs_fstat(fd)
  local size = stat and stat.size or 0
  local from = math.max(since, size - 65536)
  local data = size > from and vim.uv.fs_read(fd, size - from, from) or ''
  vim.uv.fs_close(fd)
  local found = nil
  for line in (data or ''):gmatch('[^\n]+') do
    local chunk = line:match('"stderr"%s+"(.*)"%s*$')
    if chunk then
      chunk = chunk:gsub('\\n', '\n'):gsub('\\t', ' '):gsub('\\"', '"'):gsub('\\\\', '\\')
      for piece in chunk:gmatch('[^\n]+') do
        if piece:match('%S') then
          found = vim.trim(piece)
        end
      end
    end
  end
  return found
end

local function remember_log_offset()
  local ok, path = pcall(vim.lsp.log.get_filename)
  local stat = ok and path and vim.uv.fs_stat(path)
  log_offset = stat and stat.size or 0
end

---@param bufnr integer
---@param filetype string|nil the buffer's, where not given
---@return boolean
function M.wants(bufnr, filetype)
  if not api.nvim_buf_is_valid(bufnr) or vim.bo[bufnr].buftype ~= '' then
    return false
  end
  return vim.tbl_contains(config.options.filetypes, filetype or vim.bo[bufnr].filetype)
end

--- Buffers that should have the client attached.
---@return integer[]
function M.wanted_buffers()
  local buffers = {}
  for _, bufnr in ipairs(api.nvim_list_bufs()) do
    if api.nvim_buf_is_loaded(bufnr) and M.wants(bufnr) then
      buffers[#buffers + 1] = bufnr
    end
  end
  return buffers
end

---@return vim.lsp.Client|nil
function M.client()
  return M.client_id and vim.lsp.get_client_by_id(M.client_id) or nil
end

local function cancel_retry()
  if M.retry_timer then
    M.retry_timer:stop()
    M.retry_timer:close()
    M.retry_timer = nil
  end
end

--- Neovim warns "Client codecue quit with exit code ..." on its own; CodeCue says it more clearly, so
--- that one warning is filtered out (only that one, only once).
local function silence_builtin_exit_warning()
  local original = vim.notify
  local function filtered(msg, ...)
    if type(msg) == 'string' and msg:match('^Client ' .. M.name .. ' quit with exit code') then
      return
    end
    return original(msg, ...)
  end
  vim.notify = filtered
  vim.schedule(function()
    if vim.notify == filtered then
      vim.notify = original
    end
  end)
end

local schedule_retry

---@param code integer
---@param signal integer
---@param client_id integer
local function on_exit(code, signal, client_id)
  local deliberate = stopping[client_id]
  stopping[client_id] = nil
  if client_id ~= M.client_id then
    return
  end
  M.client_id = nil
  M.pid = nil
  if deliberate then
    M.state = M.state == 'disabled' and 'disabled' or 'stopped'
    return
  end
  silence_builtin_exit_warning()
  local since = log_offset
  vim.schedule(function()
    local was_running = M.state == 'running'
    M.state = 'down'
    M.failures = M.failures + 1
    local first_failure = M.failures == 1
    local how = signal ~= 0 and ('killed by signal %d'):format(signal) or ('exit code %d'):format(code)
    -- The server's last words can reach the LSP log after its exit is reported (an exit during a blocking
    -- call, such as the Python ftplugin's provider probe, is handled first): a server that exited by itself
    -- is given a moment for them.
    local tries = signal == 0 and 10 or 0
    local function report()
      local reason = last_stderr_line(since)
      if not reason and tries > 0 then
        tries = tries - 1
        vim.defer_fn(report, 100)
        return
      end
      M.last_error = reason and ('%s (%s)'):format(reason, how) or how
      -- One message per outage: when it goes down, not on every failed restart.
      if was_running or first_failure then
        notify(
          ('the completion server stopped: %s. Restarting in the background; :CodeCue status for details.'):format(
            M.last_error
          ),
          vim.log.levels.ERROR
        )
      end
    end
    report()
    schedule_retry()
  end)
end

---@param bufnr integer
---@return string|nil
local function root_dir(bufnr)
  local name = api.nvim_buf_get_name(bufnr)
  local root = name ~= '' and vim.fs.root(bufnr, { '.git' }) or nil
  return root or vim.fn.getcwd()
end

--- Start the client if needed; attach it to `bufnr` unless `attach` is false.
---@param bufnr integer
---@param attach boolean
---@return integer|nil client_id
local function start(bufnr, attach)
  local options = config.options
  local cmd = options.cmd
  if vim.fn.executable(cmd[1]) ~= 1 then
    if M.last_error == nil or M.state ~= 'down' then
      M.state = 'down'
      M.last_error = ('server command %q not found (set `cmd` in setup, or install codecue)'):format(cmd[1])
      notify(M.last_error, vim.log.levels.ERROR)
    end
    return nil
  end
  if not M.client() then
    remember_log_offset()
    M.state = 'starting'
  end
  local client_id = vim.lsp.start({
    name = M.name,
    cmd = cmd,
    cmd_env = options.cmd_env,
    root_dir = root_dir(bufnr),
    init_options = config.init_options(options),
    handlers = {
      ['codecue/partialCompletion'] = function(_, params)
        M.on_partial(params)
      end,
    },
    on_init = function(client)
      if client.id ~= M.client_id then
        return
      end
      local recovered = M.state == 'down' or M.failures > 0
      M.state = 'running'
      M.failures = 0
      M.last_error = nil
      cancel_retry()
      if recovered then
        notify('the completion server is back.')
      end
    end,
    on_attach = function(client, attached)
      M.on_attach(client, attached)
    end,
    on_exit = on_exit,
  }, {
    bufnr = bufnr,
    attach = attach,
    reuse_client = function(client, _)
      return client.name == M.name and not compat.is_stopped(client)
    end,
  })
  if client_id and client_id ~= M.client_id then
    M.client_id = client_id
    local client = vim.lsp.get_client_by_id(client_id)
    local rpc = client and client.rpc
    M.pid = rpc and rpc.pid or nil
  end
  return client_id
end

--- Start the client if needed and attach it to `bufnr`.
---@param bufnr integer
---@return integer|nil client_id
function M.attach(bufnr)
  if M.state == 'disabled' or not M.wants(bufnr) then
    return nil
  end
  return start(bufnr, true)
end

--- Start the server for a file about to be read whose name makes it a wanted filetype, without attaching
--- (FileType attaches it). Neovim runs the filetype's own plugins before FileType reaches this plugin, and
--- for Python `has('python3')` probes for a Python provider (1.1-1.3 s on a 2-core AMD EPYC): the server
--- starts up meanwhile. Needs `attach = false` in vim.lsp.start (0.12 here; older versions start at FileType).
---@param bufnr integer
function M.start_early(bufnr)
  if not compat.has_012 or M.state == 'disabled' or M.state == 'down' or M.client() then
    return
  end
  local name = api.nvim_buf_get_name(bufnr)
  local filetype = name ~= '' and vim.filetype.match({ filename = name }) or nil
  if filetype and M.wants(bufnr, filetype) then
    start(bufnr, false)
  end
end

--- Attach every wanted buffer (which starts the server).
function M.attach_all()
  for _, bufnr in ipairs(M.wanted_buffers()) do
    M.attach(bufnr)
  end
end

schedule_retry = function()
  cancel_retry()
  local restart = config.options.restart
  if M.failures > restart.max_attempts then
    -- Give up the timer; the next edit in a wanted buffer tries again (see init.lua).
    return
  end
  local delay = math.min(restart.delay_ms * 2 ^ (M.failures - 1), restart.max_delay_ms)
  M.retry_timer = assert(vim.uv.new_timer())
  M.retry_timer:start(delay, 0, vim.schedule_wrap(function()
    cancel_retry()
    if M.state == 'down' and not M.client() then
      M.attach_all()
    end
  end))
end

--- Try again now if the server is down and no retry is pending (called on edits).
function M.retry_if_down()
  if M.state == 'down' and not M.client() and not M.retry_timer then
    M.attach_all()
  end
end

--- Stop the server on purpose (no crash message, no restart).
---@param disable boolean|nil keep it stopped until started again
function M.stop(disable)
  cancel_retry()
  local client = M.client()
  if disable then
    M.state = 'disabled'
  end
  if client then
    stopping[client.id] = true
    compat.stop(client, true)
  end
  if not disable then
    M.state = 'stopped'
  end
end

--- Stop and start again now.
function M.restart()
  M.stop(false)
  M.client_id = nil
  M.failures = 0
  M.last_error = nil
  M.state = 'stopped'
  M.attach_all()
end

return M
