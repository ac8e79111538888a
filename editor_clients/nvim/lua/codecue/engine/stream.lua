--- The `codecue/partialCompletion` extension, client side: while a completion is generating the server
--- sends the full text so far (not a delta) with the document URI, version, position, a done flag and the
--- request id. This module draws it as growing ghost text, keeps it in step with type-through, and
--- accepts from it when the user accepts before the final item arrives. Both engines use it.
local ghost = require('codecue.ghost')
local suggestion = require('codecue.suggestion')
local compat = require('codecue.compat')

local M = {}

--- Redraw the streamed text of the buffer at the cursor, minus what was typed since.
--- Drops it when the typing went another way. Returns whether something is drawn.
---@param bufnr integer
---@return boolean
function M.refresh(bufnr)
  local state = suggestion.get(bufnr)
  local stream = state.stream
  if not stream then
    return false
  end
  local rest = suggestion.remainder(bufnr, stream, stream.text)
  local row, col = suggestion.cursor(bufnr)
  if not rest or rest == '' or not row then
    state.stream = nil
    ghost.clear(bufnr)
    suggestion.emit(bufnr, 'clear', '')
    return false
  end
  ghost.show(bufnr, row, col, rest)
  return true
end

--- Handle one notification. `on_shown(bufnr)` runs after the stream is drawn (the native engine hides
--- the built-in display there, which then shows an older item).
--- `shown_elsewhere(bufnr)` returns what the engine itself shows (its final item's rest), if anything.
---@param params table
---@param on_shown fun(bufnr: integer)|nil
---@param shown_elsewhere fun(bufnr: integer): string|nil
function M.on_partial(params, on_shown, shown_elsewhere)
  if type(params) ~= 'table' or type(params.uri) ~= 'string' or type(params.text) ~= 'string' then
    return
  end
  local bufnr = suggestion.buffer_for_uri(params.uri)
  if not bufnr then
    return
  end
  local state = suggestion.get(bufnr)
  local request = state.request
  if not suggestion.partial_matches(request, params) then
    return
  end
  ---@cast request codecue.Request
  local incoming = { row = request.row, col = request.col, text = params.text, request_id = params.requestId }
  -- A new generation often starts with what is already on screen (the rest of an accepted suggestion, or
  -- type-through): keep the longer text until the new one outgrows it or goes another way.
  local shown = state.stream
  local shown_rest = shown and suggestion.remainder(bufnr, shown, shown.text)
  if not shown_rest and shown_elsewhere then
    shown_rest = shown_elsewhere(bufnr)
  end
  local incoming_rest = suggestion.remainder(bufnr, incoming, incoming.text)
  if shown_rest and incoming_rest and #shown_rest > #incoming_rest
    and shown_rest:sub(1, #incoming_rest) == incoming_rest then
    suggestion.emit(bufnr, 'stream', params.text, params.done, params.requestId)
    return
  end
  state.stream = incoming
  if M.refresh(bufnr) and on_shown then
    on_shown(bufnr)
  end
  -- After drawing, so that listeners see what is on screen.
  suggestion.emit(bufnr, 'stream', params.text, params.done, params.requestId)
end

--- Cancel the buffer's request if it is still running and what it will answer is already stale:
--- the user typed since and the text streamed so far does not extend to what was typed.
---@param bufnr integer
function M.cancel_if_stale(bufnr)
  local state = suggestion.get(bufnr)
  local request = state.request
  if not request or request.done or not request.id then
    return
  end
  local typed = suggestion.typed_since(bufnr, request)
  if typed == '' then
    return
  end
  local streamed = state.stream and state.stream.text or ''
  if typed ~= nil and #streamed >= #typed and streamed:sub(1, #typed) == typed then
    return
  end
  M.cancel(bufnr)
end

--- Cancel the buffer's running request, if any.
---@param bufnr integer
function M.cancel(bufnr)
  local state = suggestion.get(bufnr)
  local request = state.request
  if not request or request.done or not request.id then
    return
  end
  request.done, request.cancelled = true, true
  local client = vim.lsp.get_client_by_id(request.client_id)
  if client and not compat.is_stopped(client) then
    compat.cancel(client, request.id)
  end
end

--- Accept part of the streamed text. Returns false if no streamed text is showing.
---@param bufnr integer
---@param kind 'all'|'line'|'word'
---@return boolean
function M.accept(bufnr, kind)
  local state = suggestion.get(bufnr)
  local stream = state.stream
  if not stream then
    return false
  end
  local rest = suggestion.remainder(bufnr, stream, stream.text)
  if not rest or rest == '' then
    return false
  end
  local part = suggestion.take(rest, kind)
  suggestion.insert(bufnr, part, kind)
  if #part < #rest then
    -- Keep showing the rest; it is still right, since what was just inserted matches it.
    M.refresh(bufnr)
  else
    state.stream = nil
    ghost.clear(bufnr)
  end
  return true
end

--- Show `text` at the cursor as if streamed: used after a partial accept of a final item, so the rest
--- stays on screen until the server's next answer replaces it.
---@param bufnr integer
---@param text string
function M.carry_over(bufnr, text)
  local row, col = suggestion.cursor(bufnr)
  if not row or text == '' then
    return
  end
  suggestion.get(bufnr).stream = { row = row, col = col, text = text }
  M.refresh(bufnr)
end

return M
