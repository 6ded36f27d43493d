"""What the daemon serves: the secure port and the webhooks.

* :mod:`.server`: the HTTPS listener, ``/healthz``, ``/livez``, ``/readyz``,
  ``/metrics`` and ``/configz`` (:class:`~.server.SecureServer`);
* :mod:`.delegated`: delegated authentication and authorization (TokenReviews and
  SubjectAccessReviews), as upstream's secure port does;
* :mod:`.certs`: the serving certificate, given or self-signed;
* :mod:`.webhooks`: the admission webhooks (``--webhooks``) on their own port.

Nothing here reads flags: the daemon (:mod:`kube_ccm.app.manager`) hands each
server its settings.
"""
