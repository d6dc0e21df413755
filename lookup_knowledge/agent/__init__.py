"""The agent surface: the tool that runs the lookup DAG, its recorded entry point and the MCP server."""
