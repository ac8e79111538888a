--- `codecue/cursorMoved`: tell the server where the cursor came to rest, so it can warm its caches for
--- that place before the first keystroke there. Shared by both engines.
---
--- Sent once the cursor has stayed put for `cursor_moved.debounce_ms` (one vim.uv timer, restarted by
--- every move), for the current buffer when the server completes it (a wanted filetype, the client
--- attached), only for a place the server has not heard of yet (not the last one sent, nor the one the
--- last completion request was made at, in the same buffer version), and never while a suggestion is
--- shown or a request is running. In insert mode both engines ask for a completion wherever the cursor
--- stops (a request warms its place better than a notification), so a move there only cancels a
--- pending notification; what is sent comes from moves outside insert mode, from entering a buffer and
--- from the client attaching.
local api = vim.api
local compat = require('codecue.compat')
local ghost = require('codecue.ghost')
local suggestion = require('codecue.suggestion')

local METHOD = 'codecue/cursorMoved'

local M = {
  enabled = true, -- suggestions on (:CodeCue toggle)
  options = { enabled = true, debounce_ms = 150 },
  --- Set by init.lua: the attached client for a buffer the server completes, or nil.
  ---@type fun(bufnr: integer): vim.lsp.Client|nil
  client_for = function(_)
    return nil
  end,
}

---@type uv.uv_timer_t|nil
local timer = nil
---@type table<integer, { line: integer, character: integer, version: integer|nil }>
local last_sent = {}

local function active()
  return M.enabled and M.options.enabled
end

--- Stop the pending notification, if any.
function M.cancel()
  if timer then
    timer:stop()
  end
end

--- What would be sent for the current window now, or nil (and why) when nothing should be.
---@return table|nil params, vim.lsp.Client|nil client, string|nil why_not
function M.pending_params()
  local bufnr = api.nvim_get_current_buf()
  if not active() then
    return nil, nil, 'disabled'
  end
  local client = M.client_for(bufnr)
  if not client then
    return nil, nil, 'not completed'
  end
  if api.nvim_get_mode().mode:match('^[iR]') then
    return nil, nil, 'insert mode'
  end
  local state = suggestion.get(bufnr)
  local request = state.request
  if ghost.visible(bufnr) or state.stream or (request and not request.done) then
    return nil, nil, 'a suggestion is shown or generating'
  end
  local params = compat.position_params(client)
  local position = params.position
  local version = vim.lsp.util.buf_versions[bufnr]
  local function here(place)
    return place ~= nil and place.line == position.line and place.character == position.character
      and place.version == version
  end
  local sent = last_sent[bufnr]
  if here(sent) then
    return nil, nil, 'already sent'
  end
  if request and here({ line = request.position.line, character = request.position.character,
    version = request.version }) then
    return nil, nil, 'a completion was requested here'
  end
  return params, client, nil
end

local function fire()
  local params, client = M.pending_params()
  if not params or not client then
    return
  end
  local bufnr = api.nvim_get_current_buf()
  last_sent[bufnr] = {
    line = params.position.line,
    character = params.position.character,
    version = vim.lsp.util.buf_versions[bufnr],
  }
  compat.notify(client, METHOD, params)
end

--- The cursor moved (or a buffer was entered): send after the pause, unless it moves again first.
function M.schedule()
  if not active() then
    M.cancel()
    return
  end
  if api.nvim_get_mode().mode:match('^[iR]') then
    -- The engine's own request (debounced like this) covers a place in insert mode.
    M.cancel()
    return
  end
  if not timer then
    timer = assert(vim.uv.new_timer())
  end
  timer:stop()
  timer:start(M.options.debounce_ms, 0, vim.schedule_wrap(fire))
end

--- Forget a buffer (detached, wiped).
---@param bufnr integer
function M.forget(bufnr)
  last_sent[bufnr] = nil
end

--- The server restarted: it knows no place.
function M.reset()
  last_sent = {}
end

---@param options table { enabled: boolean, debounce_ms: integer }
function M.setup(options)
  M.options = options
  if not active() then
    M.cancel()
  end
end

---@param enabled boolean
function M.set_enabled(enabled)
  M.enabled = enabled
  if not enabled then
    M.cancel()
  end
end

return M
