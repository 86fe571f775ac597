-- archspec's language server for YAML specs, on Neovim 0.7 and later (docs/editors.md's setup).
-- On Neovim 0.11 and later, vim.lsp.config("archspec", {...}) with vim.lsp.enable("archspec")
-- does the same. tests/editor/session.lua runs a headless session with it.
local archspec_client = nil -- Neovim 0.7: the one server, shared by every YAML buffer

vim.api.nvim_create_autocmd("FileType", {
  pattern = "yaml",
  callback = function(args)
    local config = { name = "archspec", cmd = { "archspec", "lsp" }, root_dir = vim.fn.getcwd() }
    if vim.lsp.start then -- Neovim 0.8 and later: starts the server once, attaches each buffer
      vim.lsp.start(config, { bufnr = args.buf })
    else -- Neovim 0.7
      if archspec_client == nil or vim.lsp.client_is_stopped(archspec_client) then
        archspec_client = vim.lsp.start_client(config)
      end
      vim.lsp.buf_attach_client(args.buf, archspec_client)
    end
  end,
})
