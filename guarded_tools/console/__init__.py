"""The people's pages: the admin, owner consent, how a request reads to people."""
