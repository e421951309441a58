from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.error_body import ErrorBody
from ...models.job_view import JobView
from ...models.release_job import ReleaseJob
from ...types import UNSET, Unset
from typing import cast



def _get_kwargs(
    id: int,
    *,
    body: None | ReleaseJob | Unset = UNSET,

) -> dict[str, Any]:
    headers: dict[str, Any] = {}


    

    

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/v1/jobs/{id}/release".format(id=quote(str(id), safe=""),),
    }

    
    if isinstance(body, ReleaseJob):
        _kwargs["json"] = body.to_dict()
    else:
        _kwargs["json"] = body

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs



def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> ErrorBody | JobView | None:
    if response.status_code == 200:
        response_200 = JobView.from_dict(response.json())



        return response_200

    if response.status_code == 400:
        response_400 = ErrorBody.from_dict(response.json())



        return response_400

    if response.status_code == 401:
        response_401 = ErrorBody.from_dict(response.json())



        return response_401

    if response.status_code == 403:
        response_403 = ErrorBody.from_dict(response.json())



        return response_403

    if response.status_code == 404:
        response_404 = ErrorBody.from_dict(response.json())



        return response_404

    if response.status_code == 409:
        response_409 = ErrorBody.from_dict(response.json())



        return response_409

    if response.status_code == 413:
        response_413 = ErrorBody.from_dict(response.json())



        return response_413

    if response.status_code == 415:
        response_415 = ErrorBody.from_dict(response.json())



        return response_415

    if response.status_code == 429:
        response_429 = ErrorBody.from_dict(response.json())



        return response_429

    if response.status_code == 503:
        response_503 = ErrorBody.from_dict(response.json())



        return response_503

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Response[ErrorBody | JobView]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    id: int,
    *,
    client: AuthenticatedClient | Client,
    body: None | ReleaseJob | Unset = UNSET,

) -> Response[ErrorBody | JobView]:
    """ `POST /v1/jobs/{id}/release` — a held job is due again: at once, or at
    its `run_at` if that is later. Its payload is checked against its
    topic's current schema first (still failing: 409 `payload_schema` with
    the job); `{"force": true}` skips the check, and the dispatcher sends
    this attempt unchecked. 409 `not_held` with the job when it is not held.

    Args:
        id (int):
        body (None | ReleaseJob | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ErrorBody | JobView]
     """


    kwargs = _get_kwargs(
        id=id,
body=body,

    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)

def sync(
    id: int,
    *,
    client: AuthenticatedClient | Client,
    body: None | ReleaseJob | Unset = UNSET,

) -> ErrorBody | JobView | None:
    """ `POST /v1/jobs/{id}/release` — a held job is due again: at once, or at
    its `run_at` if that is later. Its payload is checked against its
    topic's current schema first (still failing: 409 `payload_schema` with
    the job); `{"force": true}` skips the check, and the dispatcher sends
    this attempt unchecked. 409 `not_held` with the job when it is not held.

    Args:
        id (int):
        body (None | ReleaseJob | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ErrorBody | JobView
     """


    return sync_detailed(
        id=id,
client=client,
body=body,

    ).parsed

async def asyncio_detailed(
    id: int,
    *,
    client: AuthenticatedClient | Client,
    body: None | ReleaseJob | Unset = UNSET,

) -> Response[ErrorBody | JobView]:
    """ `POST /v1/jobs/{id}/release` — a held job is due again: at once, or at
    its `run_at` if that is later. Its payload is checked against its
    topic's current schema first (still failing: 409 `payload_schema` with
    the job); `{"force": true}` skips the check, and the dispatcher sends
    this attempt unchecked. 409 `not_held` with the job when it is not held.

    Args:
        id (int):
        body (None | ReleaseJob | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ErrorBody | JobView]
     """


    kwargs = _get_kwargs(
        id=id,
body=body,

    )

    response = await client.get_async_httpx_client().request(
        **kwargs
    )

    return _build_response(client=client, response=response)

async def asyncio(
    id: int,
    *,
    client: AuthenticatedClient | Client,
    body: None | ReleaseJob | Unset = UNSET,

) -> ErrorBody | JobView | None:
    """ `POST /v1/jobs/{id}/release` — a held job is due again: at once, or at
    its `run_at` if that is later. Its payload is checked against its
    topic's current schema first (still failing: 409 `payload_schema` with
    the job); `{"force": true}` skips the check, and the dispatcher sends
    this attempt unchecked. 409 `not_held` with the job when it is not held.

    Args:
        id (int):
        body (None | ReleaseJob | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ErrorBody | JobView
     """


    return (await asyncio_detailed(
        id=id,
client=client,
body=body,

    )).parsed
