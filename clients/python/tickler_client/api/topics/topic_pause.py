from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.error_body import ErrorBody
from ...models.topic_view import TopicView
from typing import cast



def _get_kwargs(
    topic: str,

) -> dict[str, Any]:
    

    

    

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/v1/topics/{topic}/pause".format(topic=quote(str(topic), safe=""),),
    }


    return _kwargs



def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> ErrorBody | TopicView | None:
    if response.status_code == 200:
        response_200 = TopicView.from_dict(response.json())



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


def _build_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Response[ErrorBody | TopicView]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    topic: str,
    *,
    client: AuthenticatedClient | Client,

) -> Response[ErrorBody | TopicView]:
    """ `POST /v1/topics/{topic}/pause` — once this answers (after about 3 s:
    every instance has taken the pause in by then), no job of the topic is
    produced (one a dispatcher claimed a moment before is already on its
    way); due jobs stay pending. Idempotent.

    Args:
        topic (str):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ErrorBody | TopicView]
     """


    kwargs = _get_kwargs(
        topic=topic,

    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)

def sync(
    topic: str,
    *,
    client: AuthenticatedClient | Client,

) -> ErrorBody | TopicView | None:
    """ `POST /v1/topics/{topic}/pause` — once this answers (after about 3 s:
    every instance has taken the pause in by then), no job of the topic is
    produced (one a dispatcher claimed a moment before is already on its
    way); due jobs stay pending. Idempotent.

    Args:
        topic (str):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ErrorBody | TopicView
     """


    return sync_detailed(
        topic=topic,
client=client,

    ).parsed

async def asyncio_detailed(
    topic: str,
    *,
    client: AuthenticatedClient | Client,

) -> Response[ErrorBody | TopicView]:
    """ `POST /v1/topics/{topic}/pause` — once this answers (after about 3 s:
    every instance has taken the pause in by then), no job of the topic is
    produced (one a dispatcher claimed a moment before is already on its
    way); due jobs stay pending. Idempotent.

    Args:
        topic (str):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ErrorBody | TopicView]
     """


    kwargs = _get_kwargs(
        topic=topic,

    )

    response = await client.get_async_httpx_client().request(
        **kwargs
    )

    return _build_response(client=client, response=response)

async def asyncio(
    topic: str,
    *,
    client: AuthenticatedClient | Client,

) -> ErrorBody | TopicView | None:
    """ `POST /v1/topics/{topic}/pause` — once this answers (after about 3 s:
    every instance has taken the pause in by then), no job of the topic is
    produced (one a dispatcher claimed a moment before is already on its
    way); due jobs stay pending. Idempotent.

    Args:
        topic (str):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ErrorBody | TopicView
     """


    return (await asyncio_detailed(
        topic=topic,
client=client,

    )).parsed
