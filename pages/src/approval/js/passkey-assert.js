// The approval page's passkey step: navigator.credentials.get, then post the assertion.
(o.allowCredentials || []).forEach((c) => { c.id = d(c.id); });
b.addEventListener('click', async () => {
  b.disabled = true;
  m.textContent = 'Waiting for your passkey…';
  try {
    const c = await navigator.credentials.get({ publicKey: o });
    const r = c.response;
    f.elements.response.value = JSON.stringify({
      id: c.id, rawId: e(c.rawId), type: c.type, extensions: {},
      response: {
        authenticatorData: e(r.authenticatorData),
        clientDataJSON: e(r.clientDataJSON),
        signature: e(r.signature),
        userHandle: r.userHandle ? e(r.userHandle) : null,
      },
    });
    f.submit();
  } catch (x) {
    m.textContent = 'The passkey was not used (' + x.name + ').';
    b.disabled = false;
  }
});
