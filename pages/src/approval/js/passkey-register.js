// The registration: navigator.credentials.create, then post the credential.
o.user.id = d(o.user.id);
(o.excludeCredentials || []).forEach((c) => { c.id = d(c.id); });
b.addEventListener('click', async () => {
  b.disabled = true;
  m.textContent = 'Waiting for your authenticator…';
  try {
    const c = await navigator.credentials.create({ publicKey: o });
    const r = c.response;
    f.elements.response.value = JSON.stringify({
      id: c.id, rawId: e(c.rawId), type: c.type, extensions: {},
      response: {
        attestationObject: e(r.attestationObject),
        clientDataJSON: e(r.clientDataJSON),
        transports: r.getTransports ? r.getTransports() : [],
      },
    });
    f.submit();
  } catch (x) {
    m.textContent = 'No passkey was created (' + x.name + ').';
    b.disabled = false;
  }
});
